package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Deleting tasks: Purge for finished ones in bulk, Delete for named ones.

// DefaultPurgeBatch is how many tasks one purge transaction deletes.
const DefaultPurgeBatch = 10000

// PurgeRequest says which finished tasks Purge deletes.
type PurgeRequest struct {
	// FinishedBefore is required: tasks that finished before it are deleted.
	FinishedBefore time.Time
	// Statuses may be StatusCompleted, StatusFailed and StatusCancelled;
	// they default to all three. Pending and running tasks are never
	// deleted.
	Statuses []Status
	// Queues, when set, keeps the purge to these queues.
	Queues []string
	// Names, when set, keeps the purge to tasks with these names.
	Names []string
	// BatchSize bounds how many tasks one transaction deletes. Defaults to
	// DefaultPurgeBatch (10,000), at most MaxBatch.
	BatchSize int
	// Progress, if set, is called after each committed batch with the number
	// of tasks deleted so far.
	Progress func(purged int64)
}

// Purge deletes finished tasks, with their history, in batches like
// Requeue. It returns how many it deleted; on error, how many the batches
// committed before it deleted. It is recorded in the audit trail batch by
// batch.
func (c *Client) Purge(ctx context.Context, req PurgeRequest) (int64, error) {
	statuses, batch, err := req.check()
	if err != nil {
		return 0, err
	}
	request := filterRequest(Filter{Statuses: req.Statuses, Queues: req.Queues, Names: req.Names, FinishedBefore: req.FinishedBefore})
	a, err := c.newAudit(ctx, nil, AuditPurge, request)
	if err != nil {
		return 0, err
	}
	if err := a.begin(ctx); err != nil {
		return 0, err
	}
	var purged, after int64
	for {
		var row db.TaskPurgeBatchRow
		err := a.batch(ctx, func(x pgerr.Executor) (int64, error) {
			var err error
			row, err = c.queries.TaskPurgeBatch(ctx, x, db.TaskPurgeBatchParams{
				Statuses:       statuses,
				FinishedBefore: req.FinishedBefore,
				AfterID:        after,
				Queues:         nonNil(req.Queues),
				Names:          nonNil(req.Names),
				BatchSize:      int32(batch),
			})
			if err != nil {
				return 0, fmt.Errorf("purging tasks: %w", err)
			}
			return row.Deleted, nil
		})
		if err != nil {
			return purged, a.finish(ctx, err)
		}
		purged += row.Deleted
		if row.Picked > 0 && req.Progress != nil {
			req.Progress(purged)
		}
		if row.Picked < int64(batch) {
			return purged, a.finish(ctx, nil)
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
	if statuses, _, err = (Filter{Statuses: r.Statuses}).selection("purge", finished, finished); err != nil {
		return nil, 0, err
	}
	if r.FinishedBefore.IsZero() {
		return nil, 0, fmt.Errorf("%w: purge needs FinishedBefore", ErrInvalidRequest)
	}
	batch, err = batchSize(r.BatchSize, DefaultPurgeBatch)
	return statuses, batch, err
}

// Delete deletes the named tasks, with their history, whatever their
// status but running: a worker holds a running task (cancel it, then
// delete it). A task a worker claims while Delete waits for its row is
// running by then, and skipped. It is recorded in the audit trail, in the
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
