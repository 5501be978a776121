package db

import "context"

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
