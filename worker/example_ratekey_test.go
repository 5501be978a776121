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

	for _, s := range []queue.Status{queue.StatusCompleted, queue.StatusPending} {
		n, _ := q.Count(ctx, queue.Filter{Statuses: []queue.Status{s}})
		fmt.Println(s, n)
	}
	keyed, _ := q.RateKeys(ctx)
	for _, l := range keyed {
		fmt.Printf("%s: %d keys, %d used\n", l.Limit, l.Keys, l.Used)
		for _, k := range l.Busiest {
			fmt.Printf("  %s: %d used of 2\n", k.Key, k.Used)
		}
	}
	// Output:
	// completed 4
	// pending 1
	// name:crm.push: 2 keys, 4 used
	//   customer-42: 2 used of 2
	//   customer-7: 2 used of 2
}
