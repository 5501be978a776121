package queue_test

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// A delayed task waits, scheduled, until its run time, measured on the
// database's clock; workers do not claim it before.
func ExampleWithDelay() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	id, _ := q.Enqueue(ctx, "trial.reminder", map[string]string{"user": "ada"}, queue.WithDelay(72*time.Hour))
	task, _ := q.Get(ctx, id.ID)
	fmt.Println(task.Status)
	fmt.Println("runs", task.RunAt.Sub(task.CreatedAt), "after it was enqueued")

	// An operator can make it due now (skiplock run-now).
	res, _ := q.RunNow(ctx, []int64{id.ID})
	task, _ = q.Get(ctx, id.ID)
	fmt.Println(len(res.IDs), "made due:", task.Status)
	// Output:
	// scheduled
	// runs 72h0m0s after it was enqueued
	// 1 made due: pending
}
