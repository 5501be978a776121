package worker

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/db"
)

// customPlans sends statements unnamed (pgx.QueryExecModeExec), so that
// PostgreSQL plans each call with its real parameters. The claim and the
// outcome write must never run on a cached generic plan: one cached while
// the table was small compares every running row with every row of the
// batch (a 1,000-row write: 2,640 ms generic against 9 ms custom, measured
// in docs/PERFORMANCE.md), and the claim's generic plan is a sequential
// scan and sort (111 ms against 2 ms). Planning costs about 0.1-0.3 ms a
// call, spread over hundreds of tasks.
//
// An unnamed statement also takes one round trip where a cached one takes
// two the first time it runs on a connection (its Parse and Describe, then
// its execution): the statements that run once or seldom on a connection,
// Run's checks at start above all, use it for that. Across a 2.2 ms round
// trip, caching them had cost a worker about 35 ms before its first claim.
type customPlans struct{ db.DBTX }

func (c customPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.DBTX.Exec(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (c customPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return c.DBTX.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (c customPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return c.DBTX.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}
