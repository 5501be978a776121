package queue_test

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

// Cancel stops pending (and failed) tasks for good; they are claimed again
// only if requeued.
func ExampleClient_Cancel() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	later, _ := q.Enqueue(ctx, "newsletter.send", nil, queue.WithDelay(time.Hour))
	res, err := q.Cancel(ctx, queue.CancelRequest{IDs: []int64{later, 424242}})
	if err != nil {
		fmt.Println(err)
		return
	}
	task, _ := q.Get(ctx, later)
	fmt.Println("cancelled:", res.Changed, task.Status)
	fmt.Printf("skipped: task %d (status %q: not found)\n", res.Skipped[0].ID, res.Skipped[0].Status)
	// Output:
	// cancelled: 1 cancelled
	// skipped: task 424242 (status "": not found)
}

// Cancel reaches a task that a worker runs, on whichever machine, when its
// statuses include StatusRunning: the handler's context is cancelled, and
// a handler that returns its error leaves the task cancelled.
func ExampleClient_Cancel_running() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)
	id, _ := q.Enqueue(ctx, "video.encode", map[string]string{"file": "talk.mp4"})

	started, stopped := make(chan struct{}), make(chan struct{})
	w := worker.New(pool, worker.Config{
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	runCtx, stop := context.WithCancel(ctx)
	finished := make(chan error)
	go func() {
		finished <- w.Run(runCtx, worker.Handlers{"video.encode": func(ctx context.Context, t *worker.Task) error {
			close(started)
			<-ctx.Done() // encoding, until told to stop
			close(stopped)
			return ctx.Err()
		}})
	}()

	<-started
	res, _ := q.Cancel(ctx, queue.CancelRequest{
		IDs: []int64{id}, Filter: queue.Filter{Statuses: []queue.Status{queue.StatusRunning}},
	})
	fmt.Println("asked to cancel:", len(res.Requested))
	<-stopped
	stop()
	<-finished // Run returns once every outcome is written
	task, _ := q.Get(ctx, id)
	fmt.Println("status:", task.Status)
	// Output:
	// asked to cancel: 1
	// status: cancelled
}
