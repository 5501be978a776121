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

// A running worker starts claiming from a queue added with AddQueue, and
// stops with RemoveQueue: its running tasks finish, its pending ones stay
// pending.
func ExampleWorker_AddQueue() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	done := make(chan string, 1)
	w := worker.New(pool, worker.Config{
		Queues:       []string{"default"},
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	finished := make(chan error)
	go func() {
		finished <- w.Run(runCtx, worker.Handlers{"report.build": func(ctx context.Context, t *worker.Task) error {
			done <- t.Queue
			return nil
		}})
	}()

	q.Enqueue(ctx, "report.build", nil, queue.WithQueue("reports"))
	if err := w.AddQueue("reports", 2); err != nil { // at most 2 of its tasks at once here
		fmt.Println(err)
		return
	}
	fmt.Println("ran a task of", <-done)
	fmt.Println("queues:", w.Queues())

	if err := w.RemoveQueue(ctx, "reports"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("queues:", w.Queues())
	fmt.Println(w.RemoveQueue(ctx, "reports"))
	stop()
	<-finished
	// Output:
	// ran a task of reports
	// queues: [default reports]
	// queues: [default]
	// skiplock: the worker does not claim from queue "reports" (it claims from ["default"])
}
