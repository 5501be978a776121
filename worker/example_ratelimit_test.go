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

	for _, s := range []queue.Status{queue.StatusCompleted, queue.StatusPending} {
		n, _ := q.Count(ctx, queue.Filter{Statuses: []queue.Status{s}})
		fmt.Println(s, n)
	}
	limits, _ := q.RateLimits(ctx)
	fmt.Printf("%s: %d used of 2\n", limits[0].Key, limits[0].Used)
	// Output:
	// completed 2
	// pending 3
	// queue:sms: 2 used of 2
}
