package queue

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/control"
	"github.com/skiplock/skiplock/internal/defaults"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Cancelling tasks: Cancel, for waiting, pending and failed tasks, and
// for running ones by a request to the workers that run them.

// CancelRequest says which tasks Cancel cancels.
type CancelRequest struct {
	// Filter selects the tasks to cancel: named by Filter.IDs (every named
	// task is reported: cancelled, or skipped with its status), or matched
	// by its other fields; an empty Filter selects every task Cancel
	// applies to. Its Statuses may be StatusWaiting, StatusScheduled,
	// StatusPending, StatusRetrying, StatusFailed and StatusRunning; they
	// default to all but running. StatusRunning asks the workers running
	// the tasks to cancel them (see Cancel), in the same call and audit
	// record.
	Filter Filter
	// BatchSize bounds how many tasks one transaction cancels. Defaults to
	// 5,000, at most MaxBatch.
	BatchSize int
	// Progress, if set, is called after each committed batch with the number
	// of tasks cancelled so far.
	Progress func(cancelled int64)
}

// Cancel cancels waiting, scheduled, pending, retrying and failed tasks:
// they become cancelled,
// with finished_at set, and are never claimed again unless requeued. It
// works in batches like Requeue, with the same safety while workers run: a
// pending task that a worker claims first is running by the time its
// batch re-checks it, and is left alone.
//
// A running task is cancelled only when the request's statuses include
// StatusRunning, and then by a request: the worker running it cancels its
// handler's context at once, on whichever machine (NOTIFY, with a poll as
// fallback). A handler that then returns an error leaves its task
// cancelled; one that returns nil completes it. Such tasks are listed in
// ChangeResult.Requested. With a Filter, running tasks are read in pages
// of MaxListLimit after the other statuses' batches; one that finishes
// meanwhile gets no request.
//
// It is recorded in the audit trail like Requeue, in one record that
// counts the tasks cancelled and the running ones asked: as
// AuditCancelRunning when the statuses are StatusRunning alone, else as
// AuditCancel.
func (c *Client) Cancel(ctx context.Context, req CancelRequest) (ChangeResult, error) {
	return c.cancel(ctx, nil, req)
}

// CancelTx is Cancel within tx: every batch runs in it, and the requests
// to workers are sent when it commits. Rolled back, it is a dry run: it
// reports what Cancel would do, decided by the same statements, and leaves
// no audit record.
func (c *Client) CancelTx(ctx context.Context, tx Executor, req CancelRequest) (ChangeResult, error) {
	return c.cancel(ctx, pgerr.Interpreting(tx), req)
}

// Validate returns the error, wrapping ErrInvalidRequest, that Cancel would
// return for r before reading or changing anything; nil when r is valid.
func (r CancelRequest) Validate() error {
	_, _, _, _, _, err := r.check()
	return err
}

// cancellable lists the statuses Cancel cancels, its default; StatusRunning
// asks instead.
var cancellable = []Status{StatusWaiting, StatusScheduled, StatusPending, StatusRetrying, StatusFailed}

// check validates r and returns the stored statuses it cancels (running not
// among them) and the kinds of pending tasks (waits), whether it asks
// running tasks, its batch size and IDs.
func (r CancelRequest) check() (statuses, waits []string, running bool, batch int, ids []int64, err error) {
	allowed := append(slices.Clone(cancellable), StatusRunning)
	all, waits, err := r.Filter.selection("cancel", allowed, cancellable)
	if err != nil {
		return nil, nil, false, 0, nil, err
	}
	for _, s := range all {
		if s == string(StatusRunning) {
			running = true
		} else {
			statuses = append(statuses, s)
		}
	}
	if batch, err = batchSize(r.BatchSize, defaults.CancelBatch); err != nil {
		return nil, nil, false, 0, nil, err
	}
	ids, err = checkIDs(r.Filter)
	return statuses, waits, running, batch, ids, err
}

// cancel is Cancel through tx, the caller's transaction, or through
// transactions of its own when tx is nil.
func (c *Client) cancel(ctx context.Context, tx pgerr.Executor, req CancelRequest) (ChangeResult, error) {
	var res ChangeResult
	statuses, waits, running, batch, ids, err := req.check()
	if err != nil {
		return res, err
	}
	action := AuditCancel
	if len(statuses) == 0 {
		action = AuditCancelRunning
	}
	request := filterRequest(req.Filter)
	if len(ids) > 0 {
		request = idsRequest(ids)
	}
	asked := req.Filter.Statuses
	if len(asked) == 0 {
		asked = cancellable
	}
	request["statuses"] = asked
	a, err := c.newAudit(ctx, tx, action, request)
	if err != nil {
		return res, err
	}
	progress := func() {
		if req.Progress != nil {
			req.Progress(res.Changed)
		}
	}

	if len(ids) > 0 {
		res.IDs = []int64{}
		var requested, asking []int64
		// The record counts the tasks cancelled and the running ones asked
		// to cancel: the change returns both, and they are told apart after.
		// The running ones of a batch count once it has committed.
		err := c.changeIDs(ctx, a, ids, batch, &res, func(done int64) {
			requested, asking = append(requested, asking...), nil
			res.Changed = done - int64(len(requested))
			progress()
		}, func(x pgerr.Executor, chunk []int64) ([]int64, error) {
			var done []int64
			if len(statuses) > 0 {
				var err error
				done, err = c.queries.TaskCancelMany(ctx, x, db.TaskCancelManyParams{Ids: chunk, Statuses: statuses, Waits: nonNil(waits)})
				if err != nil {
					return nil, fmt.Errorf("cancelling tasks: %w", err)
				}
			}
			if running {
				rest := slices.DeleteFunc(slices.Clone(chunk), func(id int64) bool { return slices.Contains(done, id) })
				asked, err := c.cancelRunning(ctx, x, rest)
				if err != nil {
					return nil, fmt.Errorf("cancelling running tasks: %w", err)
				}
				asking = asked
				done = append(done, asked...)
			}
			return done, nil
		})
		slices.Sort(requested)
		res.IDs = slices.DeleteFunc(res.IDs, func(id int64) bool { _, ok := slices.BinarySearch(requested, id); return ok })
		res.Changed = int64(len(res.IDs))
		for _, id := range requested {
			res.Skipped = append(res.Skipped, SkippedTask{ID: id, Status: StatusRunning})
		}
		slices.SortFunc(res.Skipped, func(x, y SkippedTask) int { return cmp.Compare(x.ID, y.ID) })
		if running {
			res.Requested = nonNil(requested)
		}
		return res, err
	}

	if err := a.begin(ctx); err != nil {
		return res, err
	}
	f := req.Filter
	var after int64
	for len(statuses) > 0 {
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
		res.Changed += row.Cancelled
		if row.Picked > 0 {
			progress()
		}
		if row.Picked < int64(batch) {
			break
		}
		after = row.LastID
	}
	if running {
		res.Requested = []int64{}
		err := c.cancelRunningMatching(ctx, a, f, &res.Requested)
		slices.Sort(res.Requested)
		if err != nil {
			return res, a.finish(ctx, err)
		}
	}
	return res, a.finish(ctx, nil)
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

// cancelRunningMatching asks, batch by batch of a's record, the workers
// running the tasks f selects to cancel them, and adds the tasks asked to
// requested. Running tasks are few (each holds a worker's slot), so it
// reads them in pages of MaxListLimit.
func (c *Client) cancelRunningMatching(ctx context.Context, a *audit, f Filter, requested *[]int64) error {
	f.Statuses = []Status{StatusRunning}
	var before int64
	for {
		tasks, err := c.List(ctx, f, Page{Limit: MaxListLimit, BeforeID: before})
		if err != nil || len(tasks) == 0 {
			return err
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
			return fmt.Errorf("cancelling running tasks: %w", err)
		}
		*requested = append(*requested, got...)
		before = ids[len(ids)-1]
	}
}
