package queue

import (
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

// CancelRequest says which pending or failed tasks Cancel cancels. Name
// tasks with IDs, or select them with Filter.
type CancelRequest struct {
	// IDs names the tasks to cancel. With IDs, only Filter.Statuses may be
	// set, and every named task is reported: cancelled, or skipped with its
	// status.
	IDs []int64
	// Filter selects the tasks to cancel when IDs is empty; an empty Filter
	// selects every pending and failed task. Its Statuses may be
	// StatusPending and StatusFailed; they default to both.
	Filter Filter
	// BatchSize bounds how many tasks one transaction cancels. Defaults to
	// DefaultCancelBatch (5,000), at most MaxBatch.
	BatchSize int
	// Progress, if set, is called after each committed batch with the number
	// of tasks cancelled so far.
	Progress func(cancelled int64)
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
}

// Cancel cancels pending and failed tasks: they become cancelled, with
// finished_at set, and are never claimed again unless requeued. Running
// tasks are not changed. It works in batches like Requeue, with the same
// safety while workers run: a pending task that a worker claims first is
// running by the time its batch re-checks it, and is left alone.
func (c *Client) Cancel(ctx context.Context, req CancelRequest) (CancelResult, error) {
	return c.cancel(ctx, c.exec, req)
}

// CancelTx is Cancel within tx: every batch runs in it. Rolled back, it is
// a dry run: it reports what Cancel would do, decided by the same
// statements.
func (c *Client) CancelTx(ctx context.Context, tx Executor, req CancelRequest) (CancelResult, error) {
	return c.cancel(ctx, pgerr.Interpreting(tx), req)
}

// Validate returns the error, wrapping ErrInvalidRequest, that Cancel would
// return for r before reading or changing anything; nil when r is valid.
func (r CancelRequest) Validate() error {
	_, _, _, err := r.check()
	return err
}

// check validates r and returns its statuses, batch size and IDs.
func (r CancelRequest) check() (statuses []string, batch int, ids []int64, err error) {
	cancellable := []Status{StatusPending, StatusWaiting, StatusFailed}
	if statuses, err = r.Filter.statuses("cancel", cancellable, cancellable); err != nil {
		return nil, 0, nil, err
	}
	if batch, err = batchSize(r.BatchSize, DefaultCancelBatch); err != nil {
		return nil, 0, nil, err
	}
	ids, err = checkIDs(r.IDs, r.Filter)
	return statuses, batch, ids, err
}

func (c *Client) cancel(ctx context.Context, x pgerr.Executor, req CancelRequest) (CancelResult, error) {
	var res CancelResult
	statuses, batch, ids, err := req.check()
	if err != nil {
		return res, err
	}
	progress := func() {
		if req.Progress != nil {
			req.Progress(res.Cancelled)
		}
	}

	if len(ids) > 0 {
		res.IDs = []int64{}
		for chunk := range slices.Chunk(ids, batch) {
			done, err := c.queries.TaskCancelMany(ctx, x, db.TaskCancelManyParams{Ids: chunk, Statuses: statuses})
			if err != nil {
				return res, fmt.Errorf("cancelling tasks: %w", err)
			}
			res.IDs = append(res.IDs, done...)
			res.Cancelled += int64(len(done))
			progress()
		}
		slices.Sort(res.IDs)
		res.Skipped, err = c.skipped(ctx, x, ids, res.IDs)
		return res, err
	}

	f := req.Filter
	var after int64
	for {
		row, err := c.queries.TaskCancelBatch(ctx, x, db.TaskCancelBatchParams{
			Statuses:       statuses,
			AfterID:        after,
			Queues:         nonNil(f.Queues),
			Names:          nonNil(f.Names),
			Since:          optTime(f.Since),
			FinishedBefore: optTime(f.FinishedBefore),
			ErrorContains:  optString(f.ErrorContains),
			BatchSize:      int32(batch),
		})
		if err != nil {
			return res, fmt.Errorf("cancelling tasks: %w", err)
		}
		res.Cancelled += row.Cancelled
		if row.Picked > 0 {
			progress()
		}
		if row.Picked < int64(batch) {
			return res, nil
		}
		after = row.LastID
	}
}

// CancelRunning asks the workers running the given tasks to cancel them:
// the handler's context is cancelled at once on whichever machine runs it
// (NOTIFY, with a poll as fallback). A handler that then returns an error
// leaves its task cancelled; one that returns nil completes it. It returns
// the IDs that were running; others are not touched (see Cancel for pending
// and failed tasks).
func (c *Client) CancelRunning(ctx context.Context, ids []int64) ([]int64, error) {
	_, ctlChannel, err := c.channels(ctx)
	if err != nil {
		return nil, fmt.Errorf("cancelling running tasks: %w", err)
	}
	var running []int64
	err = c.inTx(ctx, func(tx pgerr.Executor) error {
		running, err = c.queries.TaskRequestCancel(ctx, tx, ids)
		if err != nil || len(running) == 0 {
			return err
		}
		msgs := make([]string, len(running))
		for i, id := range running {
			msgs[i] = control.Cancel(id)
		}
		return c.queries.QueueNotify(ctx, tx, db.QueueNotifyParams{Channel: ctlChannel, Queues: msgs})
	})
	if err != nil {
		return nil, fmt.Errorf("cancelling running tasks: %w", err)
	}
	return running, nil
}

// CancelRunningMatching asks the workers running the tasks f selects to
// cancel them, as CancelRunning does for named tasks, and returns how many
// it asked. f.Statuses may be empty or StatusRunning. Running tasks are few
// (each holds a worker's slot), so it reads them in pages of MaxListLimit;
// a task that finishes meanwhile gets no request. On error, the count is of
// the pages asked before it.
func (c *Client) CancelRunningMatching(ctx context.Context, f Filter) (int64, error) {
	running := []Status{StatusRunning}
	if _, err := f.statuses("cancel running", running, running); err != nil {
		return 0, err
	}
	f.Statuses = running
	var requested, before int64
	for {
		tasks, err := c.List(ctx, ListFilter{Filter: f, Limit: MaxListLimit, BeforeID: before})
		if err != nil || len(tasks) == 0 {
			return requested, err
		}
		ids := make([]int64, len(tasks))
		for i, t := range tasks {
			ids[i] = t.ID
		}
		got, err := c.CancelRunning(ctx, ids)
		requested += int64(len(got))
		if err != nil {
			return requested, err
		}
		before = ids[len(ids)-1]
	}
}
