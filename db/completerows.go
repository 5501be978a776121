package db

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// TaskCompleteManyIDs runs TaskCompleteMany and returns the ids it wrote,
// read into one slice through one scan target: sqlc's method allocates a
// new int64 and rows.Scan's arguments for every row, two allocations per
// task completed. The statement and its parameters are sqlc's
// (TaskCompleteMany); TestTaskClaimPlainRows (worker) checks that both return the
// same ids.
//
// Written by hand, like claimrows.go: sqlc leaves this file alone.
func (q *Queries) TaskCompleteManyIDs(ctx context.Context, db DBTX, arg TaskCompleteManyParams) ([]int64, error) {
	rows, err := db.Query(ctx, taskCompleteMany,
		arg.Ids,
		arg.Attempts,
		arg.ClaimedUs,
		arg.WorkerID,
	)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	items := make([]int64, 0, len(arg.Ids))
	var id int64
	dest := []any{&id}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		items = append(items, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}

// QueueTaskCompleteMany queues TaskCompleteMany on b, to run in the batch's
// implicit transaction with the statements queued after it, and appends
// the ids it wrote to *ids as the batch's results are read: a claim that
// carries the outcomes of tasks that held a place (worker/handoff.go).
// The statement and its parameters are sqlc's (TaskCompleteMany).
func (q *Queries) QueueTaskCompleteMany(b *pgx.Batch, arg TaskCompleteManyParams, ids *[]int64) {
	b.Queue(taskCompleteMany,
		arg.Ids,
		arg.Attempts,
		arg.ClaimedUs,
		arg.WorkerID,
	).Query(appendIDs(ids))
}

// QueueTaskFinishMany is QueueTaskCompleteMany for TaskFinishMany, the
// write of any outcome. The statement and its parameters are sqlc's.
func (q *Queries) QueueTaskFinishMany(b *pgx.Batch, arg TaskFinishManyParams, ids *[]int64) {
	b.Queue(taskFinishMany,
		arg.Ids,
		arg.Attempts,
		arg.Statuses,
		arg.DelayMs,
		arg.Refunds,
		arg.Errors,
		arg.Outputs,
		arg.ClaimedUs,
		arg.WorkerID,
	).Query(appendIDs(ids))
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
