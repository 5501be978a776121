package queue_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

func ExampleClient_EnqueueTx() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	// A task enqueued in a transaction that rolls back never existed.
	_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := q.EnqueueTx(ctx, tx, "welcome.email", map[string]string{"to": "ada@example.com"}); err != nil {
			return err
		}
		return fmt.Errorf("signup failed")
	})
	// One enqueued in a transaction that commits exists.
	var res queue.EnqueueResult
	_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		res, err = q.EnqueueTx(ctx, tx, "welcome.email", map[string]string{"to": "grace@example.com"})
		return err
	})
	task, _ := q.Get(ctx, res.ID)
	var n int
	pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks").Scan(&n)
	fmt.Println(n, task.Name, task.Status, string(task.Payload))
	// Output: 1 welcome.email pending {"to": "grace@example.com"}
}
