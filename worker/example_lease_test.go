package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// In lease mode a running task is guarded by a lease that the worker's
// heartbeat renews, not by an advisory lock held by a session, so workers
// can run behind a transaction pooler (PgBouncer in transaction mode). A
// dead worker's tasks are rescued once their lease runs out.
func ExampleModeLease() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)
	id, _ := q.Enqueue(ctx, "thumbnail.make", map[string]string{"photo": "cat.jpg"})

	held := make(chan bool, 1)
	w := worker.New(pool, worker.Config{
		Mode:          worker.ModeLease,
		LeaseDuration: 30 * time.Second, // the time to notice a dead worker
		PollInterval:  10 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	runCtx, stop := context.WithCancel(ctx)
	finished := make(chan error)
	go func() {
		finished <- w.Run(runCtx, worker.Handlers{"thumbnail.make": func(ctx context.Context, t *worker.Task) error {
			// The advisory locks some session holds on skiplock's tasks.
			var locks int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
				WHERE locktype = 'advisory' AND classid = 'skiplock_tasks'::regclass`).Scan(&locks)
			held <- locks > 0
			return err
		}})
	}()
	byLock := <-held
	stop()
	<-finished
	task, _ := q.Get(ctx, id.ID)
	fmt.Println("advisory lock while running:", byLock)
	fmt.Println("status:", task.Status)
	// Output:
	// advisory lock while running: false
	// status: completed
}
