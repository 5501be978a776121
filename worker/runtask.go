package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/queue"
)

// ErrNotPending is returned by RunTask for a task that exists but is not
// pending: running elsewhere, or finished.
var ErrNotPending = errors.New("skiplock: task is not pending")

// RunResult is what one attempt run by Worker.RunTask came to.
type RunResult struct {
	// Outcome is how the attempt ended: OutcomeSuccess, OutcomeError,
	// OutcomePanic, OutcomeTimeout, OutcomeSnoozed, OutcomeCancelled...
	Outcome Outcome
	// Status is where the task went: completed; retrying, scheduled or
	// pending (due at once) for a retry or a snooze; failed; cancelled.
	Status queue.Status
	// Error is the error recorded in the task's history; empty on success
	// and for a snooze.
	Error string
	// Task is the task as stored after the attempt.
	Task *queue.Task
}

// RunTask runs one attempt of the pending task id now and returns once its
// outcome is written, as Run would have run it: claimed (its attempt
// counted, this worker recorded), its handler from handlers wrapped in
// Config.Middleware, timed out, its error or panic given to Config.OnError
// or Config.OnPanic, then retried, snoozed, failed or cancelled by the same
// rules, in the same statement. It ignores the task's run time, a paused
// queue, rate limits and concurrency limits (queue.Limit: it takes no
// slot): it is for tests (package worker/skiplocktest) and for running one
// task by hand.
//
// It needs no Run: the task is guarded by a lease of Config.LeaseDuration,
// renewed while the handler runs, whatever Config.Mode, so a running
// worker's rescuer takes the task back only if this process stops renewing
// it. The handler's context is cancelled when ctx is (an error outcome,
// retried; a handler that ignores it is abandoned after AbandonAfter); it
// does not carry ctx's values, as a worker's handlers do not. A task that
// does not exist returns an error wrapping queue.ErrNotFound; one that is
// not pending, ErrNotPending; no handlers at all, ErrNoHandlers. A pending
// task whose name has no handler in handlers is left alone, as Run leaves
// it for a worker that handles it: its result has OutcomeNoHandler and
// StatusPending, and its attempt is not spent.
func (w *Worker) RunTask(ctx context.Context, handlers Handlers, id int64) (*RunResult, error) {
	if w.cfgErr != nil {
		return nil, w.cfgErr
	}
	if len(handlers) == 0 {
		return nil, ErrNoHandlers
	}
	row, err := w.queries.TaskClaimByID(ctx, w.pool, db.TaskClaimByIDParams{
		WorkerID: w.cfg.WorkerID, LeaseMs: w.cfg.LeaseDuration.Milliseconds(), ID: id, Names: handlerNames(handlers),
	})
	if err != nil {
		if err = pgerr.Interpret(err); !errors.Is(err, pgerr.ErrNotFound) {
			if pgerr.IsExclusiveKeyTaken(err) {
				return nil, fmt.Errorf("skiplock: running task %d: a task with its exclusive key is running", id)
			}
			return nil, fmt.Errorf("skiplock: claiming task %d: %w", id, err)
		}
		t, gerr := w.producer.Get(ctx, id)
		if gerr != nil {
			return nil, gerr
		}
		pending := t.Status == queue.StatusPending || t.Status == queue.StatusScheduled || t.Status == queue.StatusRetrying
		if _, ok := handlers[t.Name]; !ok && pending {
			res := noHandler(t.Name, handlers)
			return &RunResult{Outcome: OutcomeNoHandler, Status: t.Status, Error: res.err, Task: t}, nil
		}
		return nil, fmt.Errorf("%w: task %d is %s", ErrNotPending, id, t.Status)
	}

	e := w.newExecution(db.TaskClaimRow(row), 0, nil)
	e.scope.alone = true
	// The caller's cancellation reaches the handler, as an error of the
	// attempt (cause context.Canceled).
	stopWatch := context.AfterFunc(ctx, func() { w.cancelExecution(e, context.Cause(ctx)) })
	defer stopWatch()
	type settlement struct {
		f   finish
		res result
	}
	settled := make(chan settlement, 1)
	e.onSettle = func(f finish, res result) { settled <- settlement{f, res} }
	w.armAbandon(e)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		w.renewOne(e)
	}()
	go w.execute(e, wrap(handlers, w.cfg.Middleware))
	s := <-settled
	f := s.f
	<-renewed

	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	written, err := w.writeFinishes(wctx, finishParams([]finish{f}))
	if err != nil {
		return nil, fmt.Errorf("skiplock: recording the outcome of task %d: %w", id, pgerr.Interpret(err))
	}
	if len(written) == 0 {
		return nil, fmt.Errorf("skiplock: the outcome of task %d was discarded: its lease was lost and the task rescued", id)
	}
	t, err := w.producer.Get(wctx, id)
	if err != nil {
		return nil, err
	}
	return &RunResult{Outcome: Outcome(s.res.outcome), Status: f.next(), Error: f.entry.Error, Task: t}, nil
}

// renewOne renews the lease of a RunTask execution every third of it until
// the execution settles, and cancels the handler if the lease is lost.
func (w *Worker) renewOne(e *execution) {
	tick := time.NewTicker(w.cfg.LeaseDuration / 3)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-e.ctx.Done():
			// Settled, timed out or cancelled: a handler still running
			// after a cancellation is abandoned within AbandonAfter, which
			// is shorter than any lease worth having.
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), w.cfg.LeaseDuration/3)
		ids, err := w.queries.TaskLeaseRenew(rctx, w.pool, db.TaskLeaseRenewParams{
			WorkerID: w.cfg.WorkerID, LeaseMs: w.cfg.LeaseDuration.Milliseconds(),
			Ids: []int64{e.task.ID}, Attempts: []int32{int32(e.task.Attempt)}, ClaimedUs: []int64{e.claimed.UnixMicro()},
		})
		cancel()
		if err == nil && len(ids) == 0 {
			w.cancelExecution(e, errLockLost)
			return
		}
	}
}
