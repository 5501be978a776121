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

// A rate limit bounds how many tasks start per window, across every worker
// that declares it; the others stay pending until a later window.
func ExampleRateLimit() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)
	for range 5 {
		q.Enqueue(ctx, "sms.send", nil, queue.WithQueue("sms"))
	}

	sent := make(chan struct{}, 5)
	w := worker.New(pool, worker.Config{
		Queues:       []string{"sms"},
		RateLimits:   []worker.RateLimit{{Queue: "sms", Limit: 2, Per: 24 * time.Hour}}, // the provider's daily quota
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	runCtx, stop := context.WithCancel(ctx)
	finished := make(chan error)
	go func() {
		finished <- w.Run(runCtx, worker.Handlers{"sms.send": func(context.Context, *worker.Task) error {
			sent <- struct{}{}
			return nil
		}})
	}()
	<-sent
	<-sent
	stop()
	<-finished

	// The window's use is on the dashboard's Limits page.
	stats, _ := q.Stats(ctx)
	fmt.Println("completed", stats.Total.Completed)
	fmt.Println("pending", stats.Total.Pending)
	// Output:
	// completed 2
	// pending 3
}
