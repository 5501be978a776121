package queue

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/control"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Cancelling tasks: Cancel for pending and failed ones, CancelRunning and
// CancelRunningMatching for running ones.

// DefaultCancelBatch is how many tasks one cancel transaction changes.
const DefaultCancelBatch = 5000

// CancelRequest says which tasks Cancel cancels: pending, scheduled,
// retrying, waiting or failed ones.
type CancelRequest struct {
	// Filter selects the tasks to cancel: named by Filter.IDs (every named
	// task is reported: cancelled, or skipped with its status), or matched
	// by its other fields; an empty Filter selects every task Cancel
	// applies to. Its Statuses may be StatusWaiting, StatusScheduled,
	// StatusPending, StatusRetrying and StatusFailed; they default to all
	// five.
	Filter Filter
	// BatchSize bounds how many tasks one transaction cancels. Defaults to
	// DefaultCancelBatch (5,000), at most MaxBatch.
	BatchSize int
	// Progress, if set, is called after each committed batch with the number
	// of tasks cancelled so far.
	Progress func(cancelled int64)
	// Running, with Filter.IDs, also asks the workers running any of the named
	// tasks to cancel them, as CancelRunning does, in the same transaction
	// and the same audit record: one operator change, one record. Those
	// tasks are listed in CancelResult.Requested (and in Skipped, as
	// running). Ignored without Filter.IDs (see CancelRunningMatching).
	Running bool
}

// CancelResult reports what Cancel did.
type CancelResult struct {
	// Cancelled is how many tasks were cancelled.
	Cancelled int64
	// IDs lists the cancelled tasks, in order, when the request named IDs.
	IDs []int64
	// Skipped lists the named tasks that were not cancelled: running,
	// completed, already cancelled, or not found.
	Skipped []SkippedTask
	// Requested lists, in order, the named running tasks whose workers were
	// asked to cancel them (CancelRequest.Running).
	Requested []int64
}

// Cancel cancels pending (scheduled, retrying) and failed tasks: they become cancelled, with
// finished_at set, and are never claimed again unless requeued. Running
// tasks are not changed. It works in batches like Requeue, with the same
// safety while workers run: a pending task that a worker claims first is
// running by the time its batch re-checks it, and is left alone. It is
// recorded in the audit trail like Requeue.
func (c *Client) Cancel(ctx context.Context, req CancelRequest) (CancelResult, error) {
	return c.cancel(ctx, nil, req)
}

// CancelTx is Cancel within tx: every batch runs in it. Rolled back, it is
// a dry run: it reports what Cancel would do, decided by the same
// statements, and leaves no audit record.
func (c *Client) CancelTx(ctx context.Context, tx Executor, req CancelRequest) (CancelResult, error) {
	return c.cancel(ctx, pgerr.Interpreting(tx), req)
}

// Validate returns the error, wrapping ErrInvalidRequest, that Cancel would
// return for r before reading or changing anything; nil when r is valid.
func (r CancelRequest) Validate() error {
	_, _, _, _, err := r.check()
	return err
}

// cancellable lists the statuses Cancel applies to.
var cancellable = []Status{StatusWaiting, StatusScheduled, StatusPending, StatusRetrying, StatusFailed}

// check validates r and returns its stored statuses and waits, batch size
// and IDs.
func (r CancelRequest) check() (statuses, waits []string, batch int, ids []int64, err error) {
	if statuses, waits, err = r.Filter.selection("cancel", cancellable, cancellable); err != nil {
		return nil, nil, 0, nil, err
	}
	if batch, err = batchSize(r.BatchSize, DefaultCancelBatch); err != nil {
		return nil, nil, 0, nil, err
	}
	ids, err = checkIDs(r.Filter)
	return statuses, waits, batch, ids, err
}

// cancel is Cancel through tx, the caller's transaction, or through
// transactions of its own when tx is nil.
func (c *Client) cancel(ctx context.Context, tx pgerr.Executor, req CancelRequest) (CancelResult, error) {
	var res CancelResult
	statuses, waits, batch, ids, err := req.check()
	if err != nil {
		return res, err
	}
	request := filterRequest(req.Filter)
	if len(ids) > 0 {
		request = idsRequest(ids)
	}
	request["statuses"] = req.Filter.Statuses
	if len(req.Filter.Statuses) == 0 {
		request["statuses"] = cancellable
	}
	running := req.Running && len(ids) > 0
	if running {
		request["running"] = true
	}
	a, err := c.newAudit(ctx, tx, AuditCancel, request)
	if err != nil {
		return res, err
	}
	progress := func() {
		if req.Progress != nil {
			req.Progress(res.Cancelled)
		}
	}

	if len(ids) > 0 {
		cr := ChangeResult{IDs: []int64{}}
		requested := []int64{}
		// The record counts the tasks cancelled and the running ones asked
		// to cancel: the change returns both, and they are told apart after.
		err := c.changeIDs(ctx, a, ids, batch, &cr, func(done int64) {
			res.Cancelled = done - int64(len(requested))
			progress()
		}, func(x pgerr.Executor, chunk []int64) ([]int64, error) {
			done, err := c.queries.TaskCancelMany(ctx, x, db.TaskCancelManyParams{Ids: chunk, Statuses: statuses, Waits: nonNil(waits)})
			if err != nil {
				return nil, fmt.Errorf("cancelling tasks: %w", err)
			}
			if running {
				rest := slices.DeleteFunc(slices.Clone(chunk), func(id int64) bool { return slices.Contains(done, id) })
				asked, err := c.cancelRunning(ctx, x, rest)
				if err != nil {
					return nil, fmt.Errorf("cancelling running tasks: %w", err)
				}
				requested = append(requested, asked...)
				done = append(done, asked...)
			}
			return done, nil
		})
		slices.Sort(requested)
		cancelled := slices.DeleteFunc(cr.IDs, func(id int64) bool { _, ok := slices.BinarySearch(requested, id); return ok })
		skipped := cr.Skipped
		for _, id := range requested {
			skipped = append(skipped, SkippedTask{ID: id, Status: StatusRunning})
		}
		slices.SortFunc(skipped, func(x, y SkippedTask) int { return cmp.Compare(x.ID, y.ID) })
		return CancelResult{Cancelled: int64(len(cancelled)), IDs: cancelled, Skipped: skipped, Requested: requested}, err
	}

	if err := a.begin(ctx); err != nil {
		return res, err
	}
	f := req.Filter
	var after int64
	for {
		var row db.TaskCancelBatchRow
		err := a.batch(ctx, func(x pgerr.Executor) (int64, error) {
			var err error
			row, err = c.queries.TaskCancelBatch(ctx, x, db.TaskCancelBatchParams{
				Statuses:       statuses,
				AfterID:        after,
				Queues:         nonNil(f.Queues),
				Names:          nonNil(f.Names),
				Since:          optTime(f.Since),
				FinishedBefore: optTime(f.FinishedBefore),
				ErrorContains:  optString(f.ErrorContains),
				Waits:          nonNil(waits),
				SequenceKey:    optString(f.Sequence),
				BatchSize:      int32(batch),
			})
			if err != nil {
				return 0, fmt.Errorf("cancelling tasks: %w", err)
			}
			return row.Cancelled, nil
		})
		if err != nil {
			return res, a.finish(ctx, err)
		}
		res.Cancelled += row.Cancelled
		if row.Picked > 0 {
			progress()
		}
		if row.Picked < int64(batch) {
			return res, a.finish(ctx, nil)
		}
		after = row.LastID
	}
}

// CancelRunning asks the workers running the given tasks to cancel them:
// the handler's context is cancelled at once on whichever machine runs it
// (NOTIFY, with a poll as fallback). A handler that then returns an error
// leaves its task cancelled; one that returns nil completes it. It returns
// the IDs that were running; others are not touched (see Cancel for pending
// and failed tasks). The request and its audit record are one transaction.
func (c *Client) CancelRunning(ctx context.Context, ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return []int64{}, nil // nothing asked, nothing recorded
	}
	a, err := c.newAudit(ctx, nil, AuditCancelRunning, idsRequest(ids))
	if err != nil {
		return nil, err
	}
	var running []int64
	err = a.once(ctx, func(x pgerr.Executor) (int64, error) {
		var err error
		running, err = c.cancelRunning(ctx, x, ids)
		return int64(len(running)), err
	})
	if err != nil {
		return nil, fmt.Errorf("cancelling running tasks: %w", err)
	}
	return running, nil
}

// cancelRunning asks, within tx, the workers running the given tasks to
// cancel them, and returns the IDs that were running.
func (c *Client) cancelRunning(ctx context.Context, tx pgerr.Executor, ids []int64) ([]int64, error) {
	_, ctlChannel, err := c.channels(ctx)
	if err != nil {
		return nil, err
	}
	running, err := c.queries.TaskRequestCancel(ctx, tx, ids)
	if err != nil || len(running) == 0 {
		return running, err
	}
	msgs := make([]string, len(running))
	for i, id := range running {
		msgs[i] = control.Cancel(id)
	}
	return running, c.queries.QueueNotify(ctx, tx, db.QueueNotifyParams{Channel: ctlChannel, Queues: msgs})
}

// CancelRunningMatching asks the workers running the tasks f selects to
// cancel them, as CancelRunning does for named tasks, and returns how many
// it asked. f.Statuses may be empty or StatusRunning. Running tasks are few
// (each holds a worker's slot), so it reads them in pages of MaxListLimit;
// a task that finishes meanwhile gets no request. On error, the count is of
// the pages asked before it. It is recorded in the audit trail page by
// page, like a batched Requeue.
func (c *Client) CancelRunningMatching(ctx context.Context, f Filter) (int64, error) {
	running := []Status{StatusRunning}
	if _, _, err := f.selection("cancel running", running, running); err != nil {
		return 0, err
	}
	f.Statuses = running
	a, err := c.newAudit(ctx, nil, AuditCancelRunning, filterRequest(f))
	if err != nil {
		return 0, err
	}
	if err := a.begin(ctx); err != nil {
		return 0, err
	}
	var requested, before int64
	for {
		tasks, err := c.List(ctx, f, Page{Limit: MaxListLimit, BeforeID: before})
		if err != nil || len(tasks) == 0 {
			return requested, a.finish(ctx, err)
		}
		ids := make([]int64, len(tasks))
		for i, t := range tasks {
			ids[i] = t.ID
		}
		var got []int64
		err = a.batch(ctx, func(x pgerr.Executor) (int64, error) {
			var err error
			got, err = c.cancelRunning(ctx, x, ids)
			return int64(len(got)), err
		})
		if err != nil {
			return requested, a.finish(ctx, fmt.Errorf("cancelling running tasks: %w", err))
		}
		requested += int64(len(got))
		before = ids[len(ids)-1]
	}
}
