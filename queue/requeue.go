package queue

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/defaults"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/schema"
)

// Making tasks due again: Requeue (failed and cancelled tasks) and RunNow
// (pending tasks that wait for a later run time).

// RequeueRequest says which failed or cancelled tasks Requeue returns to
// pending.
type RequeueRequest struct {
	// Filter selects the tasks to requeue: named by Filter.IDs (every
	// named task is reported: requeued, or skipped with its status), or
	// matched by its other fields. Its Statuses may be StatusFailed and
	// StatusCancelled; they default to failed only.
	Filter Filter
	// ResetAttempts starts a requeued task's attempts again from zero, so it
	// gets all its MaxAttempts again. Without it a task keeps its attempt
	// count, and MaxAttempts is raised if needed so that it gets at least
	// one more attempt.
	ResetAttempts bool
	// Reason is recorded as the error of the "requeued" entry appended to
	// each task's error history. Defaults to "requeued".
	Reason string
	// BatchSize bounds how many tasks one transaction requeues. Defaults to
	// 5,000, at most MaxBatch.
	BatchSize int
	// Progress, if set, is called after each committed batch with the number
	// of tasks requeued so far.
	Progress func(requeued int64)
}

// Requeue returns failed (and, when asked, cancelled) tasks to pending, due
// now: finished_at and worker_id are cleared, and an entry with outcome
// "requeued" is appended to the error history, which is otherwise kept.
// Idle workers of the requeued queues are woken. A task goes to waiting
// instead while it has dependencies left (WithDependsOn), or while another
// task of its sequence (WithSequence) is pending, running, holding it
// (WithSequenceHold) or waiting ahead of it: it then runs in its turn.
//
// It works in batches of BatchSize tasks, each its own transaction, so a
// million tasks neither time out nor lock the table for long; Progress is
// told after each. It is safe while workers run: only tasks that are failed
// (or cancelled) when their batch locks them change, so a running task is
// never touched. Rows another transaction holds are skipped by a filter
// (they are being changed right now) and waited for when named by ID. On
// error, the result counts the batches committed before it.
//
// It is recorded in the audit trail (see WithActor): in the transaction of
// the change when it names at most BatchSize IDs, else batch by batch.
func (c *Client) Requeue(ctx context.Context, req RequeueRequest) (ChangeResult, error) {
	return c.requeue(ctx, nil, req)
}

// RequeueTx is Requeue within tx: every batch runs in it, and workers are
// woken when it commits. Rolled back, it is a dry run: it reports what
// Requeue would do, decided by the same statements, and leaves no audit
// record.
func (c *Client) RequeueTx(ctx context.Context, tx Executor, req RequeueRequest) (ChangeResult, error) {
	return c.requeue(ctx, pgerr.Interpreting(tx), req)
}

// Validate returns the error, wrapping ErrInvalidRequest, that Requeue
// would return for r before reading or changing anything; nil when r is
// valid. A tool calls it to refuse bad input before it connects.
func (r RequeueRequest) Validate() error {
	_, _, _, err := r.check()
	return err
}

// check validates r and returns its statuses, batch size and IDs.
func (r RequeueRequest) check() (statuses []string, batch int, ids []int64, err error) {
	if statuses, _, err = r.Filter.selection("requeue", []Status{StatusFailed, StatusCancelled}, []Status{StatusFailed}); err != nil {
		return nil, 0, nil, err
	}
	if batch, err = batchSize(r.BatchSize, defaults.RequeueBatch); err != nil {
		return nil, 0, nil, err
	}
	ids, err = checkIDs(r.Filter)
	return statuses, batch, ids, err
}

// requeue is Requeue through tx, the caller's transaction, or through
// transactions of its own when tx is nil.
func (c *Client) requeue(ctx context.Context, tx pgerr.Executor, req RequeueRequest) (ChangeResult, error) {
	var res ChangeResult
	statuses, batch, ids, err := req.check()
	if err != nil {
		return res, err
	}
	reason := req.Reason
	if reason == "" {
		reason = defaults.RequeueReason
	}
	request := filterRequest(req.Filter)
	if len(ids) > 0 {
		request = idsRequest(ids)
		request["statuses"] = statuses
	}
	request["reason"] = reason
	if req.ResetAttempts {
		request["reset_attempts"] = true
	}
	a, err := c.newAudit(ctx, tx, AuditRequeue, request)
	if err != nil {
		return res, err
	}
	x := tx
	if x == nil {
		x = c.exec
	}
	info, err := schema.Read(ctx, x)
	if err != nil {
		return res, err
	}
	channel, _ := schema.Channels(info.Name)
	progress := func() {
		if req.Progress != nil {
			req.Progress(res.Changed)
		}
	}
	if len(ids) > 0 {
		res.IDs = []int64{}
		err := c.changeIDs(ctx, a, ids, batch, &res, func(done int64) {
			res.Changed = done
			progress()
		}, func(x pgerr.Executor, chunk []int64) ([]int64, error) {
			row, err := c.queries.TaskRequeueMany(ctx, x, db.TaskRequeueManyParams{
				Ids: chunk, Statuses: statuses, ResetAttempts: req.ResetAttempts, Reason: reason, Channel: channel,
			})
			if err != nil {
				return nil, fmt.Errorf("requeueing tasks: %w", err)
			}
			return row.Ids, nil
		})
		return res, err
	}

	if err := a.begin(ctx); err != nil {
		return res, err
	}
	f := req.Filter
	var after int64
	for {
		var row db.TaskRequeueBatchRow
		err := a.batch(ctx, func(x pgerr.Executor) (int64, error) {
			var err error
			row, err = c.queries.TaskRequeueBatch(ctx, x, db.TaskRequeueBatchParams{
				Statuses:       statuses,
				AfterID:        after,
				Queues:         nonNil(f.Queues),
				Names:          nonNil(f.Names),
				Since:          optTime(f.Since),
				FinishedBefore: optTime(f.FinishedBefore),
				ErrorContains:  optString(f.ErrorContains),
				SequenceKey:    optString(f.Sequence),
				BatchSize:      int32(batch),
				ResetAttempts:  req.ResetAttempts,
				Reason:         reason,
				Channel:        channel,
			})
			if err != nil {
				return 0, fmt.Errorf("requeueing tasks: %w", err)
			}
			return row.Requeued, nil
		})
		if err != nil {
			return res, a.finish(ctx, err)
		}
		res.Changed += row.Requeued
		if row.Picked > 0 {
			progress()
		}
		if row.Picked < int64(batch) {
			return res, a.finish(ctx, nil)
		}
		after = row.LastID
	}
}

// RunNow makes the named pending tasks that wait for a later run time
// (scheduled, or retrying after a backoff) due now, and wakes the workers
// of their queues. Tasks in another state are skipped: a due task is
// already as early as it gets; other statuses are not waiting. It keeps
// the tasks' attempts, errors and everything else. It takes IDs only (see
// ChangeResult). It is recorded in the audit trail, in the transaction of
// the change for up to MaxBatch IDs.
func (c *Client) RunNow(ctx context.Context, ids []int64) (ChangeResult, error) {
	return c.runNow(ctx, nil, ids)
}

// RunNowTx is RunNow within tx, the workers woken when it commits. Rolled
// back, it is a dry run: it reports what RunNow would do, decided by the
// same statement, and leaves no audit record.
func (c *Client) RunNowTx(ctx context.Context, tx Executor, ids []int64) (ChangeResult, error) {
	return c.runNow(ctx, pgerr.Interpreting(tx), ids)
}

func (c *Client) runNow(ctx context.Context, tx pgerr.Executor, ids []int64) (ChangeResult, error) {
	res := ChangeResult{IDs: []int64{}}
	ids, err := namedIDs(ids)
	if err != nil {
		return res, err
	}
	a, err := c.newAudit(ctx, tx, AuditRunNow, idsRequest(ids))
	if err != nil {
		return res, err
	}
	work, _, err := c.channels(ctx)
	if err != nil {
		return res, fmt.Errorf("running tasks now: %w", err)
	}
	err = c.changeIDs(ctx, a, ids, MaxBatch, &res, nil, func(x pgerr.Executor, chunk []int64) ([]int64, error) {
		row, err := c.queries.TaskRunNowMany(ctx, x, db.TaskRunNowManyParams{Ids: chunk, Channel: work})
		if err != nil {
			return nil, fmt.Errorf("running tasks now: %w", err)
		}
		return row.Ids, nil
	})
	return res, err
}
