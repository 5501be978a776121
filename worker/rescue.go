package worker

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
)

// rescuer returns to the queue the running tasks whose worker is gone: an
// advisory lock nobody holds (its session ended) or a lease that expired.
// Every worker runs one and tries to win the rescuer's election each
// interval (RescueInterval); the one that leads rescues. A leader that dies
// or loses its session hands over within one interval.
type rescuer struct {
	elector  *elector
	queries  *db.Queries
	pool     *pgxpool.Pool
	classOID int64  // the advisory lock class of task locks
	channel  string // the work channel, to wake claimers of rescued tasks
	interval time.Duration
	// self is this worker's ID, and mode how it guards its tasks: the
	// rescuer may find its own tasks orphaned, after it lost its lock
	// session (or its leases expired) and came back, and says so.
	self string
	mode Mode
	// maxCrashes fails a task that was running during that many worker
	// deaths (Config.MaxCrashes); settle is how long after a worker's last
	// heartbeat the death of a worker without a lock session is not sure
	// yet: a process that lives dials again within it (TaskRescueOrphans).
	maxCrashes int
	settle     time.Duration
	// suspects tells the workers that a rescue made suspects
	// (worker/isolate.go).
	suspects func(ctx context.Context)
	// beforeRescue runs before each pass (guard.beforeRescue).
	beforeRescue func(ctx context.Context)
	observer     Observer
	log          *slog.Logger
	passed       func() // after each pass, if set (a test signal)
	// The two parts of a pass log a database that went away once, not
	// once per pass: the leader may pass again before it learns that its
	// election's session is gone too. Made on first use.
	orphansDown, sequencesDown *outage
}

// failed logs a part's failure through its outage; failures that a
// context's end caused are not logged.
func (r *rescuer) failed(ctx context.Context, o **outage, what string, err error) {
	if ctx.Err() == nil {
		outageOf(o, r.log, what).failed(err)
	}
}

// A pass reads every entry of the running index. Vacuum removes the
// entries of tasks that finished, and a scan that finds one dead to every
// transaction marks it so that later scans skip it; while a transaction
// holds the xmin horizon back (a session idle in transaction, a long
// report, a replica's feedback), neither can happen, and every pass visits
// the row of every task that ran since the horizon was pinned. Held at
// 5,000 tasks/s, a pass took at least 0.9 s after 5 minutes and 3.7 s after
// 14, and passes every second ran back to back: one backend busy, reading
// the table's old pages through the server's buffers, for the rest of the
// pin. Passes spaced out instead read those pages in bursts of seconds,
// and the claims and outcome writes waited on the I/O: every window of
// 10 s whose wait p99 passed 50 ms overlapped such a pass.
//
// So a pass that is slow is followed by sweeps: each pass looks at a span
// of task ids sized to take about sweepTarget, the next span at the next
// pass, until the sweep reaches the highest id there was when it began
// (the tasks created since are the next sweep's). Once a whole sweep costs
// no more than sweepAbove, passes look at every task again. Part of a
// pass's cost no span divides (reading pg_locks, a large lock table's):
// before a sweep begins, a pass over no ids measures it, and where what is
// left is no more than sweepAbove no sweep begins, nor does one until a
// pass over every task costs twice as much. And a pass
// that rescued nothing is followed no sooner than rescueRatio times what
// it took: a pass of 100 ms or less keeps the default interval, one of 2 s
// waits 20 s. A pass that rescued tasks is followed at the next interval,
// whatever it cost: where there were orphans there may be more.
const (
	rescueRatio  = 10
	sweepAbove   = 200 * time.Millisecond
	sweepTarget  = 100 * time.Millisecond
	sweepMinSpan = 1000
)

// crashSettle is how long after its last heartbeat a process that lost
// its lock session may still be dialling again (TaskRescueOrphans'
// settle_ms): a heartbeat period (the session may have died just before
// the next beat) plus the two health checks in which a live worker
// notices the loss and dials again; 5 s with the defaults. A death within
// it is counted but not sure: it stops counting once the process is heard
// from, and it never fails a task (one it would fail waits for a pass
// past it).
func crashSettle(cfg Config) time.Duration {
	return heartbeatEvery(cfg.StaleAfter) + 2*cfg.HealthInterval
}

// rescuePacer says when the rescuer's next pass is due.
type rescuePacer struct {
	due time.Time
}

// ready reports whether a pass is due at now.
func (p *rescuePacer) ready(now time.Time) bool { return !now.Before(p.due) }

// passed records a pass that started at, took took and rescued rescued
// tasks.
func (p *rescuePacer) passed(started time.Time, took time.Duration, rescued int) {
	if rescued > 0 {
		p.due = time.Time{}
		return
	}
	p.due = started.Add(rescueRatio * took)
}

// rescueSweep says which task ids the next pass looks at; its zero value
// looks at all of them.
type rescueSweep struct {
	on       bool
	from, to int64 // the next span starts at from; the sweep ends before to
	span     int64
	cost     time.Duration // of the sweep's spans so far
	// above is what a pass over every task must cost for a sweep to
	// begin, after one whose cost was mostly what spans do not divide.
	above time.Duration
}

// next returns the ids the next pass looks at: [from, to).
func (s *rescueSweep) next() (from, to int64) {
	if !s.on {
		return 0, math.MaxInt64
	}
	return s.from, min(s.from+s.span, s.to)
}

// passed records a pass over [from, to) that took took. top reads the
// highest task id, where a new sweep ends, and fixed is what a pass over
// no ids takes; it reports whether a sweep begins.
func (s *rescueSweep) passed(from, to int64, took time.Duration, top func() (int64, error), fixed func() time.Duration) (began bool) {
	if !s.on {
		if took <= max(sweepAbove, s.above) {
			return false
		}
		if took-fixed() <= sweepAbove {
			s.above = 2 * took // spans would not make passes cheaper
			return false
		}
		high, err := top()
		if err != nil {
			return false
		}
		// A span in proportion: the ids of the pass over sweepTarget.
		low := sweepStart(high)
		span := int64(float64(high+1-low) * float64(sweepTarget) / float64(took))
		*s = rescueSweep{on: true, from: low, to: high + 1, span: max(span, sweepMinSpan), above: s.above}
		return true
	}
	s.cost += took
	// The next span takes about sweepTarget, if ids cost alike: at most
	// twice or half this one, however this one went.
	scale := float64(sweepTarget) / float64(max(took, time.Microsecond))
	scale = min(max(scale, 0.5), 2)
	s.span = max(int64(float64(to-from)*scale), sweepMinSpan)
	s.from = to
	if s.from < s.to {
		return false
	}
	if s.cost <= sweepAbove {
		*s = rescueSweep{above: s.above} // cheap again: every task in one pass
		return false
	}
	high, err := top()
	if err != nil {
		*s = rescueSweep{above: s.above}
		return false
	}
	s.from, s.to, s.cost = sweepStart(high), high+1, 0
	return false
}

// rescueState is what the rescuer's loop keeps from one tick to the next.
type rescueState struct {
	pace   rescuePacer
	sweep  rescueSweep
	term   uint64    // the leadership's term that pace and sweep are of
	told   time.Time // when a slow pass was last logged
	passes int       // of this term
}

func (r *rescuer) run(ctx context.Context) {
	var st rescueState
	every(ctx, r.interval, func(ctx context.Context) { r.tick(ctx, &st) })
}

// tick keeps the election and, if this worker leads and a pass is due,
// passes.
func (r *rescuer) tick(ctx context.Context, st *rescueState) {
	// The election is kept every interval, passes or not: a lease left
	// unrenewed would hand the job to another worker.
	if !r.elector.lead(ctx) {
		return
	}
	// A leader again starts with a pass over every task, now: how slow
	// its last pass was says nothing about this term's. That pass may
	// have hung on a cut network until after the heal, while another
	// worker led; its length would otherwise hold off this leader's
	// passes (rescueRatio times as long) while its election kept every
	// other worker from rescuing.
	if t := r.elector.term(); t != st.term {
		st.term = t
		st.pace, st.sweep, st.passes = rescuePacer{}, rescueSweep{}, 0
	}
	started := time.Now()
	if !st.pace.ready(started) {
		return
	}
	r.beforeRescue(ctx)
	from, to := st.sweep.next()
	rescued := r.rescueRange(ctx, from, to)
	took := time.Since(started)
	st.pace.passed(started, took, rescued)
	began := st.sweep.passed(from, to, took,
		func() (int64, error) { return r.queries.TaskMaxID(ctx, r.pool) },
		func() time.Duration {
			start := time.Now()
			r.rescueOrphans(ctx, 0, 0) // no ids: pg_locks and the statement alone
			return time.Since(start)
		})
	st.passes++
	// The first pass of a leadership pays one-off costs (a cold cache,
	// planning): a slow one is told only from the second on.
	if st.passes > 1 && (began || st.pace.due.Sub(started) > 2*r.interval) && time.Since(st.told) > time.Minute {
		st.told = time.Now()
		r.log.Info("skiplock: a look for orphaned tasks was slow, so the rescuer looks part by part and less often; "+
			"a transaction that holds back the xmin horizon (idle in transaction, a long query, a replica's feedback) "+
			"is a common cause", "took", took.Round(time.Millisecond))
	}
	if r.passed != nil {
		r.passed()
	}
}

// rescue is one pass over every task: orphaned tasks, then stalled
// sequences. It reports how many tasks it rescued.
func (r *rescuer) rescue(ctx context.Context) int { return r.rescueRange(ctx, 0, math.MaxInt64) }

// rescueRange is a pass that looks for orphaned tasks among the ids in
// [from, to).
func (r *rescuer) rescueRange(ctx context.Context, from, to int64) int {
	rescued := r.rescueOrphans(ctx, from, to)
	r.releaseSequences(ctx)
	return rescued
}

// releaseSequences makes pending the next task of each sequence whose
// waiting tasks have nothing ahead of them: a release that the trigger left
// because a producer of the key held its lock (see migration 11).
func (r *rescuer) releaseSequences(ctx context.Context) {
	rows, err := r.queries.SequenceReleaseStalled(ctx, r.pool, r.channel)
	if err != nil {
		r.failed(ctx, &r.sequencesDown, "releasing stalled sequences", err)
		return
	}
	r.sequencesDown.ok()
	if len(rows) > 0 {
		ids := make([]int64, len(rows))
		for i, row := range rows {
			ids[i] = row.ReleasedID
		}
		r.log.Debug("skiplock: released the next task of stalled sequences", "count", len(rows), "task_ids", firstIDs(ids))
	}
}

func (r *rescuer) rescueOrphans(ctx context.Context, from, to int64) int {
	if r.maxCrashes <= 0 {
		r.maxCrashes = defaultMaxCrashes
	}
	// The rescue commits only once its rows have come back to a process
	// that is alive to ask for the commit. The statement counts no death
	// for the rescuer's own tasks (self): a task of its own without its
	// lock means its lock session was lost while the process runs. But a
	// statement sent just before the process was killed runs on after it
	// (slow on a loaded server: 40-55 ms), and finds the tasks of the
	// process's own lock session unlocked, the session having ended with
	// the process. In one implicit transaction it committed, and returned
	// a poison task that had just killed its process as if that process
	// lived: one death uncounted. Here the commit never comes, the server
	// rolls the rescue back when the connection drops, and another
	// worker's rescue counts the death.
	var rows []db.TaskRescueOrphansRow
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var err error
		rows, err = r.queries.TaskRescueOrphans(ctx, tx, db.TaskRescueOrphansParams{
			LockClassOid: r.classOID, FromID: from, ToID: to,
			MaxCrashes: int32(r.maxCrashes), SettleMs: r.settle.Milliseconds(), Self: r.self,
		})
		return err
	})
	if err != nil {
		r.failed(ctx, &r.orphansDown, "rescuing orphaned tasks", err)
		return 0
	}
	r.orphansDown.ok()
	if len(rows) == 0 {
		return 0
	}
	// One line per lost worker and pass, not per task: a storm of lost
	// sessions rescues thousands.
	queues := map[string]bool{}
	type lostWorker struct {
		ids, quarantined []int64
		died             bool
	}
	byWorker := map[string]*lostWorker{}
	suspects := false
	for _, row := range rows {
		r.observer.Rescued(row.Queue, row.Name)
		lost := deref(row.LostWorkerID)
		lw := byWorker[lost]
		if lw == nil {
			lw = &lostWorker{}
			byWorker[lost] = lw
		}
		lw.ids = append(lw.ids, row.ID)
		lw.died = lw.died || row.Died != nil && *row.Died
		if row.Status == "pending" {
			queues[row.Queue] = true
			suspects = suspects || row.Crashes > 0
		} else {
			lw.quarantined = append(lw.quarantined, row.ID)
		}
	}
	for lost, lw := range byWorker {
		if len(lw.quarantined) > 0 {
			r.log.Error("skiplock: failed tasks that were running during MaxCrashes worker deaths (poison tasks); "+
				"requeue them once fixed", "max_crashes", r.maxCrashes, "last_lost_worker", lost, "task_ids", firstIDs(lw.quarantined))
		}
		if !lw.died {
			// The process lives: what it lost is what guarded its tasks.
			msg := r.selfMessage()
			if lost != r.self {
				msg = "skiplock: rescued tasks of a worker that lost its lock session or its leases and came back"
			}
			r.log.Warn(msg, "worker_id", lost, "returned_to_queue", len(lw.ids), "task_ids", firstIDs(lw.ids))
			continue
		}
		r.log.Warn("skiplock: rescued tasks whose worker is gone (its process died, or lost its session and is not back yet); each runs alone next, one at a time",
			"lost_worker", lost, "count", len(lw.ids), "quarantined", len(lw.quarantined), "task_ids", firstIDs(lw.ids))
	}
	if len(queues) > 0 {
		names := make([]string, 0, len(queues))
		for q := range queues {
			names = append(names, q)
		}
		if err := r.queries.QueueNotify(ctx, r.pool, db.QueueNotifyParams{Channel: r.channel, Queues: names}); err != nil {
			r.log.Warn("skiplock: notifying rescued tasks", "error", err)
		}
	}
	if suspects && r.suspects != nil {
		r.suspects(ctx)
	}
	return len(rows)
}

// selfMessage is the line for this worker's own rescued tasks: it is not
// gone, it lost its guard of them and has since come back. The rescue
// charged them no attempt and counted no death.
func (r *rescuer) selfMessage() string {
	if r.mode == ModeLease {
		return "skiplock: this worker's leases expired before it could renew them (the database was out of reach); " +
			"its running tasks were returned to the queue"
	}
	return "skiplock: this worker's lock session was lost (a server restart, a failover or a network cut); " +
		"its running tasks were returned to the queue"
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
