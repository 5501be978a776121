package queue_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// A concurrency limit holds across every worker: here two workers, each
// allowed 10 tasks at once, run at most 2 tasks of one tenant at a time,
// while another tenant's tasks run beside them.
func ExampleClient_SetLimit() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	if err := q.SetLimit(ctx, queue.Limit{Key: "tenant:*", Max: 2}); err != nil {
		fmt.Println(err)
		return
	}
	var tasks []queue.NewTask
	for range 10 {
		tasks = append(tasks,
			queue.NewTask{Name: "export", Payload: "a", Options: []queue.Option{queue.WithLimitKey("tenant:a")}},
			queue.NewTask{Name: "export", Payload: "b", Options: []queue.Option{queue.WithLimitKey("tenant:b")}})
	}
	if _, err := q.EnqueueMany(ctx, tasks); err != nil {
		fmt.Println(err)
		return
	}

	var mu sync.Mutex
	running, peak := map[string]int{}, map[string]int{}
	var wg sync.WaitGroup
	wg.Add(len(tasks))
	export := func(ctx context.Context, t *worker.Task) error {
		var tenant string
		_ = t.Decode(&tenant)
		mu.Lock()
		running[tenant]++
		peak[tenant] = max(peak[tenant], running[tenant])
		mu.Unlock()
		time.Sleep(10 * time.Millisecond) // the work
		mu.Lock()
		running[tenant]--
		mu.Unlock()
		wg.Done()
		return nil
	}
	runCtx, stop := context.WithCancel(ctx)
	var stopped sync.WaitGroup
	for range 2 { // two workers, as two processes would run them
		w := worker.New(pool, worker.Config{
			Concurrency: 10, PollInterval: 10 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		stopped.Add(1)
		go func() { defer stopped.Done(); _ = w.Run(runCtx, worker.Handlers{"export": export}) }()
	}
	wg.Wait()
	stop()
	stopped.Wait()

	fmt.Println("at most 2 at once per tenant:", peak["a"] <= 2 && peak["b"] <= 2)
	limits, _ := q.Limits(ctx)
	fmt.Println(limits[0], "max", limits[0].Max, "running", limits[0].Running)
	// Output:
	// at most 2 at once per tenant: true
	// key tenant:* max 2 running 0
}
