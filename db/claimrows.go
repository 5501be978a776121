package db

import "context"

// TaskClaimPlainRows runs TaskClaimPlain and returns its rows as
// TaskClaimRow, which has the same fields, in one allocation of max rows:
// TaskClaimPlain grows its result by appending a copy of each row, and the
// worker then copied them all again into TaskClaimRow, about 1.1 kB of
// garbage per task claimed, the worker's largest. The statement, its
// parameters and the order of its columns are sqlc's (TaskClaimPlain
// above); TestTaskClaimPlainRows checks that both read the same rows.
//
// Written by hand, like doc.go: sqlc leaves this file alone.
func (q *Queries) TaskClaimPlainRows(ctx context.Context, db DBTX, arg TaskClaimPlainParams) ([]TaskClaimRow, error) {
	rows, err := db.Query(ctx, taskClaimPlain,
		arg.WorkerID,
		arg.LeaseMs,
		arg.LockClass,
		arg.UnlockIds,
		arg.LimitClass,
		arg.UnlockLimitLocks,
		arg.Queue,
		arg.UseAfter,
		arg.AfterPriority,
		arg.AfterRunAt,
		arg.AfterID,
		arg.OnlyNames,
		arg.SkipNames,
		arg.Max,
		arg.ExclusiveSeed,
	)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	items := make([]TaskClaimRow, 0, min(max(arg.Max, 1), 10000))
	for rows.Next() {
		items = append(items, TaskClaimRow{})
		i := &items[len(items)-1]
		if err := rows.Scan(
			&i.ID,
			&i.Queue,
			&i.Name,
			&i.Payload,
			&i.Metadata,
			&i.Priority,
			&i.Attempt,
			&i.MaxAttempts,
			&i.TimeoutMs,
			&i.RunAt,
			&i.CreatedAt,
			&i.StartedAt,
			&i.LimitLocks,
			&i.Exclusive,
		); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}
