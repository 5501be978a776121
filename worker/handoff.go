package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/db"
)

// A task that held a place, a slot of a concurrency limit or its
// exclusive key (execution.gated), hands it on fastest when its outcome
// rides the next claim: the lock session sends the outcome write first,
// then the claim, in one round trip and one implicit transaction
// (lockSession.claim, handoffWrite). The claim's statement runs after the
// write in the same transaction and so sees the place free: the key's
// next task, or the limit's next, is running when the transaction
// commits, in the very commit that ends the task before it. Written by
// the completer instead, the outcome took a round trip and a commit of
// its own, and the claim that took the place another after it (3
// exclusive keys, 3 workers, 10 ms tasks: about 3.5 ms from a handler's
// end to the next one's start).
//
// The commit waits for its WAL flush as an outcome's does on the pool
// (HandoffSettings). The task's own lock is released only after the
// commit, by a later statement, as the completer's writes have it: the
// rescuer never finds a running task without its lock. The slot of the
// worker's concurrency goes back as the outcome is handed over, so that a
// claim loop can make the claim that carries it.
//
// An outcome that no claim takes within handoffWait (the queue is over a
// rate limit, say, or the session is down), or whose claim fails, goes to
// the completer, as does every outcome once the worker stops claiming.
// While a statement runs on the lock session, or it ended less than
// handoffSettle ago, the wait starts again, up to handoffWaits times: the
// claim loops were woken, and one of them claims once the session is
// free. A wait that ended just after a long statement (a claim that read
// every pending task of keys all taken, 5-30 ms) gave its outcomes to the
// completer 0.2 ms before the woken claim loop sent its claim, which then
// carried nothing: the places waited for the completer's write and the
// claims after it, 20-30 ms. Across a 2.4 ms round trip, an outcome that
// went to the completer while a claim was in flight cost its place more
// than the claim would have: the claim that the wake-up had sent went
// without it, found the place still taken, and the place waited for the
// write, its unlock and the claim after them.

// handoffWait is how long a handed-over outcome waits for a claim to
// carry it before the completer writes it; handoffWaits bounds how many
// times the wait starts again while the lock session is busy, or was
// until handoffSettle ago.
const (
	handoffWait   = 5 * time.Millisecond
	handoffWaits  = 20
	handoffSettle = 2 * time.Millisecond
)

// handoffs holds the outcomes handed over for the next claim.
type handoffs struct {
	wait time.Duration
	// fallback gives outcomes no claim carried to the completer; busy
	// reports whether a statement runs on the lock session.
	fallback func([]finish)
	busy     func() bool

	mu      sync.Mutex
	pending []finish
	timer   *time.Timer
	waits   int // how many times the wait started again
	closed  bool
}

// offer hands f over to the next claim, and reports false once the worker
// stops claiming (close): the completer is then f's writer.
func (h *handoffs) offer(f finish) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.pending = append(h.pending, f)
	if h.timer == nil {
		h.waits = 0
		h.timer = time.AfterFunc(h.wait, h.expired)
	}
	return true
}

// expired ends a wait: it starts again while a statement runs on the lock
// session, else the completer takes the outcomes.
func (h *handoffs) expired() {
	h.mu.Lock()
	if h.timer != nil && !h.closed && h.waits < handoffWaits && h.busy != nil && h.busy() {
		h.waits++
		h.timer.Reset(h.wait)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.expire()
}

// take hands the pending outcomes to a claim.
func (h *handoffs) take() []finish {
	h.mu.Lock()
	defer h.mu.Unlock()
	batch := h.pending
	h.pending = nil
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	return batch
}

// expire gives the outcomes no claim took in time to the completer.
func (h *handoffs) expire() {
	if batch := h.take(); len(batch) > 0 {
		h.fallback(batch)
	}
}

// close ends the hand-overs, and gives what is pending to the completer:
// the claim loops have stopped.
func (h *handoffs) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.expire()
}

// handOff hands the outcome of a task that held a place over to the next
// claim of the lock session, and frees the task's slot, so that the claim
// may be made; it reports false when the completer is to write it: the
// task held no place, the worker deletes completed tasks (a write of two
// statements), the claims run under name or key limits (TaskClaim is
// planned per call, and carries nothing), or the worker stops claiming.
func (w *Worker) handOff(f finish) bool {
	if !f.gated || w.handoffs == nil || w.cfg.DeleteCompleted ||
		claimFor(w.limitsSeen.last(), true) == howLimited {
		return false
	}
	handed := f
	handed.slotFreed = true
	if !w.handoffs.offer(handed) {
		return false
	}
	w.slots.free([]finish{f})
	w.wake("")
	return true
}

// handoffWrite is the outcome write a claim carries.
type handoffWrite struct {
	batch []finish
	p     db.TaskFinishManyParams
	wrote []int64 // the ids written, once the batch is read
}

func newHandoffWrite(batch []finish, workerID string) *handoffWrite {
	h := &handoffWrite{batch: batch, p: finishParams(batch)}
	h.p.WorkerID = workerID
	return h
}

// queue queues the write on plan, before the claim: the settings that
// make its commit wait for the WAL flush and give it its one plan
// (OutcomePlanSettings), then the write.
func (h *handoffWrite) queue(ctx context.Context, queries *db.Queries, plan *onePlan, outcomeCommit string) error {
	h.wrote = h.wrote[:0]
	if err := queries.HandoffSettings(ctx, plan, outcomeCommit); err != nil {
		return err
	}
	if err := queries.OutcomePlanSettings(ctx, plan); err != nil {
		return err
	}
	q := queued{batch: &plan.batch, read: appendIDs(&h.wrote)}
	var err error
	if onlyCompletions(h.p) {
		_, err = queries.TaskCompleteMany(ctx, q, db.TaskCompleteManyParams{
			WorkerID: h.p.WorkerID, Ids: h.p.Ids, Attempts: h.p.Attempts, ClaimedUs: h.p.ClaimedUs,
		})
	} else {
		_, err = queries.TaskFinishMany(ctx, q, h.p)
	}
	if !errors.Is(err, errQueued) {
		return err
	}
	plan.execs++
	return nil
}

// queued is a db.DBTX that queues the query a sqlc method sends on a
// batch, with read as the reader of its rows, instead of running it; the
// method then fails with errQueued. The batch's reader (onePlan.Query)
// reads the rows when the batch runs.
type queued struct {
	batch *pgx.Batch
	read  func(pgx.Rows) error
}

var errQueued = errors.New("skiplock: queued on a batch")

func (q queued) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.batch.Queue(sql, textArrays(make([]any, 0, len(args)), args)...).Query(q.read)
	return nil, errQueued
}

func (q queued) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("skiplock: queued takes queries with rows only")
}

func (q queued) QueryRow(context.Context, string, ...any) pgx.Row {
	return firstRow{err: errors.New("skiplock: queued takes queries with rows only")}
}

// appendIDs reads rows of one bigint each into *ids.
func appendIDs(ids *[]int64) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var id int64
		for rows.Next() {
			if err := rows.Scan(&id); err != nil {
				return err
			}
			*ids = append(*ids, id)
		}
		return rows.Err()
	}
}

// carried is what follows a claim that carried outcomes and committed,
// as the completer's write is followed (completer.flush), less the slots,
// which went back at hand-over, the task locks, which the lock session
// releases, and the wake-up of every claim loop: the claim that carried
// them was one, and the session announces the places it did not take
// again.
func (w *Worker) carried(batch []finish, wrote []int64) {
	w.comp.discarded(batch, wrote)
	w.iso.freed(batch)
	w.comp.wakeDue(batch)
}

// busyOrSettling reports whether a statement runs on the session at now,
// or the last one ended less than handoffSettle before: whether a wait for
// a claim to carry handed-over outcomes starts again (handoffs.expired).
func (s *lockSession) busyOrSettling(now time.Time) bool {
	return s.busySince.Load() != 0 || now.UnixNano()-s.freeSince.Load() < int64(handoffSettle)
}
