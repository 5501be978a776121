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

// A per-key rate limit bounds how many tasks of a name start per window
// for each limit key, across every worker that declares it: one customer
// over its quota waits, pending, without holding back the others.
func ExampleRateLimit_perKey() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)
	for _, customer := range []string{"customer-42", "customer-42", "customer-42", "customer-7", "customer-7"} {
		q.Enqueue(ctx, "crm.push", customer, queue.WithLimitKey(customer))
	}

	pushed := make(chan struct{}, 5)
	w := worker.New(pool, worker.Config{
		// At most 2 pushes a day per customer, however many workers run.
		RateLimits:   []worker.RateLimit{{Name: "crm.push", Limit: 2, Per: 24 * time.Hour, PerKey: true}},
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	runCtx, stop := context.WithCancel(ctx)
	finished := make(chan error)
	go func() {
		finished <- w.Run(runCtx, worker.Handlers{"crm.push": func(context.Context, *worker.Task) error {
			pushed <- struct{}{}
			return nil
		}})
	}()
	for range 4 { // two for each customer
		<-pushed
	}
	stop()
	<-finished

	// Each key's window is in `skiplock limits` and on the dashboard.
	stats, _ := q.Stats(ctx)
	fmt.Println("completed", stats.Total.Completed)
	waiting, _ := q.List(ctx, queue.Filter{Statuses: []queue.Status{queue.StatusPending}}, queue.Page{})
	for _, t := range waiting {
		fmt.Printf("pending: %s, over its quota\n", t.Payload)
	}
	// Output:
	// completed 4
	// pending: "customer-42", over its quota
}
