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

// A paused queue keeps its tasks pending: no worker claims them until the
// queue is resumed, which wakes the workers.
func ExampleClient_PauseQueue() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)
	// The paused queues, as Stats shows them.
	paused := func() (names []string) {
		stats, _ := q.Stats(ctx)
		for _, s := range stats.Queues {
			if s.PausedAt != nil {
				names = append(names, s.Queue)
			}
		}
		return names
	}

	if err := q.PauseQueue(ctx, "reports"); err != nil {
		fmt.Println(err)
		return
	}
	id, _ := q.Enqueue(ctx, "report.build", nil, queue.WithQueue("reports"))
	fmt.Println("paused:", paused())

	ran := make(chan struct{})
	w := worker.New(pool, worker.Config{
		Queues:       []string{"reports"},
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	finished := make(chan error)
	go func() {
		finished <- w.Run(runCtx, worker.Handlers{"report.build": func(context.Context, *worker.Task) error {
			close(ran)
			return nil
		}})
	}()

	if err := q.ResumeQueue(ctx, "reports"); err != nil {
		fmt.Println(err)
		return
	}
	<-ran
	stop() // graceful: the outcome is written before Run returns
	<-finished
	task, _ := q.Get(ctx, id.ID)
	fmt.Println("after resume:", task.Status, len(paused()), "paused")
	// Output:
	// paused: [reports]
	// after resume: completed 0 paused
}
