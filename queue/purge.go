package queue

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/defaults"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Deleting tasks: Purge for finished ones selected by a Filter, Delete
// for named ones.

// PurgeRequest says which finished tasks Purge deletes.
type PurgeRequest struct {
	// Filter selects the tasks to delete; its FinishedBefore is required.
	// Its Statuses may be StatusCompleted, StatusFailed and
	// StatusCancelled; they default to all three. Pending, waiting and
	// running tasks are never purged.
	Filter Filter
	// BatchSize bounds how many tasks one transaction deletes. Defaults to
	// 10,000, at most MaxBatch.
	BatchSize int
	// Progress, if set, is called after each committed batch with the number
	// of tasks deleted so far.
	Progress func(purged int64)
}

// Purge deletes finished tasks, with their history, in batches like
// Requeue; ChangeResult.Changed counts them. It takes a Filter only: named
// tasks are deleted with Delete. It is recorded in the audit trail batch
// by batch.
func (c *Client) Purge(ctx context.Context, req PurgeRequest) (ChangeResult, error) {
	return c.purge(ctx, nil, req)
}

// PurgeTx is Purge within tx: every batch runs in it. Rolled back, it is a
// dry run: it reports how many tasks Purge would delete, decided by the
// same statements, and leaves no audit record.
func (c *Client) PurgeTx(ctx context.Context, tx Executor, req PurgeRequest) (ChangeResult, error) {
	return c.purge(ctx, pgerr.Interpreting(tx), req)
}

func (c *Client) purge(ctx context.Context, tx pgerr.Executor, req PurgeRequest) (ChangeResult, error) {
	var res ChangeResult
	statuses, batch, err := req.check()
	if err != nil {
		return res, err
	}
	a, err := c.newAudit(ctx, tx, AuditPurge, filterRequest(req.Filter))
	if err != nil {
		return res, err
	}
	if err := a.begin(ctx); err != nil {
		return res, err
	}
	f := req.Filter
	var after int64
	for {
		var row db.TaskPurgeBatchRow
		err := a.batch(ctx, func(x pgerr.Executor) (int64, error) {
			var err error
			row, err = c.queries.TaskPurgeBatch(ctx, x, db.TaskPurgeBatchParams{
				Statuses:       statuses,
				FinishedBefore: f.FinishedBefore,
				AfterID:        after,
				Queues:         nonNil(f.Queues),
				Names:          nonNil(f.Names),
				Since:          optTime(f.Since),
				ErrorContains:  optString(f.ErrorContains),
				BatchSize:      int32(batch),
			})
			if err != nil {
				return 0, fmt.Errorf("purging tasks: %w", err)
			}
			return row.Deleted, nil
		})
		if err != nil {
			return res, a.finish(ctx, err)
		}
		res.Changed += row.Deleted
		if row.Picked > 0 && req.Progress != nil {
			req.Progress(res.Changed)
		}
		if row.Picked < int64(batch) {
			return res, a.finish(ctx, nil)
		}
		after = row.LastID
	}
}

// Validate returns the error, wrapping ErrInvalidRequest, that Purge would
// return for r before reading or changing anything; nil when r is valid.
func (r PurgeRequest) Validate() error {
	_, _, err := r.check()
	return err
}

// check validates r and returns its statuses and batch size.
func (r PurgeRequest) check() (statuses []string, batch int, err error) {
	finished := []Status{StatusCompleted, StatusFailed, StatusCancelled}
	if statuses, _, err = r.Filter.selection("purge", finished, finished); err != nil {
		return nil, 0, err
	}
	if r.Filter.FinishedBefore.IsZero() {
		return nil, 0, fmt.Errorf("%w: purge needs Filter.FinishedBefore", ErrInvalidRequest)
	}
	batch, err = batchSize(r.BatchSize, defaults.PurgeBatch)
	return statuses, batch, err
}

// Delete deletes the named tasks, with their history, whatever their
// status but running: a worker holds a running task (cancel it, then
// delete it). A task a worker claims while Delete waits for its row is
// running by then, and skipped. It takes IDs only (see ChangeResult;
// Purge deletes finished tasks by Filter). It is recorded in the audit trail, in the
// transaction of the change for up to MaxBatch IDs.
func (c *Client) Delete(ctx context.Context, ids []int64) (ChangeResult, error) {
	return c.delete(ctx, nil, ids)
}

// DeleteTx is Delete within tx. Rolled back, it is a dry run: it reports
// what Delete would do, decided by the same statement, and leaves no audit
// record.
func (c *Client) DeleteTx(ctx context.Context, tx Executor, ids []int64) (ChangeResult, error) {
	return c.delete(ctx, pgerr.Interpreting(tx), ids)
}

func (c *Client) delete(ctx context.Context, tx pgerr.Executor, ids []int64) (ChangeResult, error) {
	res := ChangeResult{IDs: []int64{}}
	ids, err := namedIDs(ids)
	if err != nil {
		return res, err
	}
	a, err := c.newAudit(ctx, tx, AuditDelete, idsRequest(ids))
	if err != nil {
		return res, err
	}
	err = c.changeIDs(ctx, a, ids, MaxBatch, &res, nil, func(x pgerr.Executor, chunk []int64) ([]int64, error) {
		done, err := c.queries.TaskDeleteMany(ctx, x, chunk)
		if err != nil {
			return nil, fmt.Errorf("deleting tasks: %w", err)
		}
		return done, nil
	})
	return res, err
}
