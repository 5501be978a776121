package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/control"
)

// Poison tasks (docs/RELIABILITY.md). A rescue that finds the worker
// process of a task dead counts a crash against the task (crashes, see
// TaskRescueOrphans); a task with crashes > 0 is a suspect, which no
// ordinary claim takes. When a process dies, nobody knows which of its
// tasks killed it: each becomes a suspect and runs once alone, in a
// process with nothing else running, where a death can only be its own.
// The innocent ones complete; the guilty one takes its process down again
// and again, each time counted against it alone, until MaxCrashes fails it.
//
// The isolator does that, one worker of the fleet at a time: told that
// suspects exist (a rescue that made some notifies every worker on the
// control channel; a worker also looks once at start and whenever its
// LISTEN connection is made again), it looks for one it can run (its
// queues, its handlers: TaskSuspectNext) each RescueInterval until it finds
// none. Each look takes the isolation turn first (a row of skiplock_leaders
// that expires after isolateTurnTTL unless renewed, so a process that dies
// holding it hands it over; a worker that cannot take it looks again
// later), recounts the suspects' crashes (TaskSuspectsRecount: a death
// whose process has been heard from since no longer counts) and reads the
// next suspect. With one, it holds its claim loops back (slots.pause) and
// takes every slot of the process, which waits for its running tasks to
// finish and their outcomes to be written (at most isolateDrainWait; a
// worker whose tasks run longer gives up, its claims going on, and leaves
// suspects to other workers for isolateBackoff), then claims suspects by
// id and runs them one after another, each alone and to its written
// outcome, for up to isolateRound, and gives the slots back: its claims
// resume. A turn whose holder's lock session is gone is taken over at once
// (IsolationTurnTake).
//
// The cost: the isolating process runs one task instead of Concurrency
// while a suspect runs, plus the wait for its running tasks to end; one
// process of the fleet at a time. A suspect's run takes no rate-limit
// budget; concurrency limits and exclusive keys hold (TaskClaim).

// isolateDrainWait bounds the wait for a worker's running tasks to finish
// before it runs a suspect alone.
const isolateDrainWait = 30 * time.Second

// isolateBackoff is how long a worker whose running tasks outlasted
// isolateDrainWait leaves suspects to other workers: each try stops its
// claims for the whole wait.
const isolateBackoff = 4 * isolateDrainWait

// isolateRound bounds how long a worker runs suspects one after another
// (each alone, without a drain between them) before its claims resume.
const isolateRound = 5 * time.Second

// isolateJob is the isolation turn's row in skiplock_leaders.
const isolateJob = "isolation"

// isolator is a worker's part in running suspects alone.
type isolator struct {
	w *Worker
	// told counts the notices that suspects may exist; looked is the
	// count the last look that found none had seen.
	told, looked atomic.Uint64
	wake         chan struct{}
	// solo is the id of the suspect running alone, 0 for none; written is
	// signalled once its outcome is written (or could not be).
	solo    atomic.Int64
	written chan struct{}
	// notBefore: after running tasks outlasted the drain wait, this worker
	// leaves suspects to others for a while (pass's goroutine only).
	notBefore time.Time
}

func newIsolator(w *Worker) *isolator {
	iso := &isolator{w: w, wake: make(chan struct{}, 1), written: make(chan struct{}, 1)}
	iso.told.Store(1) // look once at start
	return iso
}

// tell records that suspects may exist, and wakes the look.
func (iso *isolator) tell() {
	if iso == nil {
		return
	}
	iso.told.Add(1)
	select {
	case iso.wake <- struct{}{}:
	default:
	}
}

// freed is called with each batch of written outcomes: it tells the
// running suspect's end.
func (iso *isolator) freed(batch []finish) {
	id := iso.solo.Load()
	if id == 0 {
		return
	}
	for _, f := range batch {
		if f.id == id {
			select {
			case iso.written <- struct{}{}:
			default:
			}
			return
		}
	}
}

// run looks for suspects each RescueInterval, or when told, until ctx
// (Run's) ends.
func (iso *isolator) run(ctx context.Context) {
	tick := time.NewTicker(iso.w.cfg.RescueInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-iso.wake:
		}
		for iso.told.Load() != iso.looked.Load() && ctx.Err() == nil {
			if !iso.pass(ctx) {
				break
			}
		}
	}
}

// pass takes the isolation turn and runs suspects alone, one after
// another, for up to isolateRound; it reports whether it ran one (and
// should look for more at once, its claims having resumed meanwhile).
func (iso *isolator) pass(ctx context.Context) bool {
	w := iso.w
	told := iso.told.Load()
	if time.Now().Before(iso.notBefore) {
		return false
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The turn first: while another worker runs a suspect, the others
	// only try a one-row upsert each look, not the reads below.
	ttl := isolateTurnTTL(w.cfg)
	if !iso.takeTurn(lctx, ttl) {
		return false // another worker runs one; look again later
	}
	defer iso.leaveTurn()
	queues := w.Queues()
	if cleared, err := w.queries.TaskSuspectsRecount(lctx, w.pool, queues); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("skiplock: recounting the crashes of suspect tasks", "error", err)
		}
	} else if cleared > 0 {
		w.log.Info("skiplock: recounted suspect tasks whose worker came back", "count", cleared)
	}
	next := func() (db.TaskSuspectNextRow, bool) {
		s, err := w.queries.TaskSuspectNext(lctx, w.pool, db.TaskSuspectNextParams{
			Queues: queues, Names: handlerNames(w.handlers),
		})
		if errors.Is(err, pgx.ErrNoRows) {
			iso.looked.Store(told)
			return s, false
		}
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("skiplock: looking for suspect tasks to run alone", "error", err)
			}
			return s, false
		}
		return s, true
	}
	s, ok := next()
	if !ok {
		return false
	}
	turnCtx, stopRenew := context.WithCancel(ctx)
	defer stopRenew()
	go func() {
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-turnCtx.Done():
				return
			case <-t.C:
				iso.takeTurn(turnCtx, ttl)
			}
		}
	}()

	// Hold the claim loops back, then take every slot of the process:
	// the running tasks' slots come back once their outcomes are written.
	sl := w.slots
	n := sl.pause()
	defer sl.resume()
	if n <= 0 {
		return false
	}
	dctx, cancelDrain := context.WithTimeout(ctx, isolateDrainWait)
	err := sl.all.Acquire(dctx, n)
	cancelDrain()
	if err != nil {
		if ctx.Err() == nil {
			iso.notBefore = time.Now().Add(isolateBackoff)
			w.log.Info("skiplock: a suspect task waits: this worker's running tasks did not finish within the drain wait; "+
				"it leaves suspects to other workers for a while", "task_id", s.ID, "wait", isolateDrainWait, "for", isolateBackoff)
		}
		return false
	}
	held := n
	defer func() { sl.release(nil, int(held)) }()
	began := time.Now()
	ran := false
	for {
		launched, written := iso.runAlone(ctx, s)
		if launched {
			held-- // its slot, which the completer gives back
		}
		if !written {
			return ran || launched
		}
		ran = true
		// Take that slot again, for the next suspect.
		actx, cancelTake := context.WithTimeout(ctx, time.Second)
		err := sl.all.Acquire(actx, 1)
		cancelTake()
		if err != nil {
			return ran
		}
		held++
		if time.Since(began) > isolateRound || ctx.Err() != nil {
			return ran
		}
		if s, ok = next(); !ok {
			return ran
		}
	}
}

// runAlone claims suspect s by id and runs it, in a process where nothing
// else runs and no claim loop claims, and returns once its outcome is
// written (or Run ends). launched says that it claimed and started the
// suspect, whose slot the completer then gives back; written, that its
// outcome is written.
func (iso *isolator) runAlone(ctx context.Context, s db.TaskSuspectNextRow) (launched, written bool) {
	w := iso.w
	rows, gen, _, err := w.guard.claim(db.TaskClaimParams{
		WorkerID:      w.cfg.WorkerID,
		Queue:         s.Queue,
		OnlyNames:     []string{s.Name},
		SkipNames:     []string{},
		OnlyIds:       []int64{s.ID},
		Max:           1,
		ExclusiveSeed: w.classOID,
		LimitClass:    w.limitClass,
		CheckFull:     true,
	}, howLimited, nil)
	if err != nil {
		w.claimFailed(s.Queue, err, &outage{log: w.log, what: "claiming a suspect task"})
		return false, false
	}
	if len(rows) == 0 {
		return false, false // taken meanwhile, or held back by a limit: look again later
	}
	r := rows[0]
	w.log.Warn("skiplock: running a suspect task alone: it was running when a worker process died",
		"task_id", r.ID, "name", r.Name, "queue", r.Queue, "worker_id", w.cfg.WorkerID)
	iso.solo.Store(r.ID)
	defer iso.solo.Store(0)
	// Drop a signal left by an earlier run.
	select {
	case <-iso.written:
	default:
	}
	limited := w.limitsSeen.look(w.queries, w.pool, false).Present
	w.launch(r, gen, nil, limited, false, nil)
	select {
	case <-iso.written:
		return true, true
	case <-ctx.Done():
		// Run ends: shutdown takes the suspect as any running task.
		return true, false
	}
}

// isolateTurnTTL is how long the isolation turn outlives its last
// renewal: a dead holder's turn passes on after it.
func isolateTurnTTL(cfg Config) time.Duration { return max(3*cfg.RescueInterval, 3*time.Second) }

// takeTurn takes or renews the isolation turn.
func (iso *isolator) takeTurn(ctx context.Context, ttl time.Duration) bool {
	w := iso.w
	n, err := w.queries.IsolationTurnTake(ctx, w.pool, db.IsolationTurnTakeParams{
		Holder: w.cfg.WorkerID, TtlMs: ttl.Milliseconds(),
	})
	return err == nil && n == 1
}

// leaveTurn hands the isolation turn over.
func (iso *isolator) leaveTurn() {
	w := iso.w
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.queries.LeaderLeaseRelease(ctx, w.pool, db.LeaderLeaseReleaseParams{Job: isolateJob, Holder: w.cfg.WorkerID})
}

// notifySuspects tells every worker, through the control channel, that a
// rescue made suspects; this worker's isolator is told at once.
func (w *Worker) notifySuspects(ctx context.Context) {
	w.iso.tell()
	if err := w.queries.QueueNotify(ctx, w.pool, db.QueueNotifyParams{Channel: w.control, Queues: []string{control.Suspects}}); err != nil {
		w.log.Warn("skiplock: notifying the workers of suspect tasks", "error", err)
	}
}
