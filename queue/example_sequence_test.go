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

// The tasks of one sequence run one at a time, in the order they were
// enqueued, however many workers and slots there are; two sequences run
// beside each other.
func ExampleWithSequence() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	type change struct {
		Account string `json:"account"`
		N       int    `json:"n"`
	}
	var tasks []queue.NewTask
	for n := 1; n <= 5; n++ {
		for _, account := range []string{"a", "b"} {
			tasks = append(tasks, queue.NewTask{Name: "ledger.apply", Payload: change{account, n},
				Options: []queue.Option{queue.WithSequence("account:" + account)}})
		}
	}
	if _, err := q.EnqueueMany(ctx, tasks); err != nil {
		fmt.Println(err)
		return
	}

	var mu sync.Mutex
	applied := map[string][]int{}
	running := map[string]bool{}
	overlap := false
	var wg sync.WaitGroup
	wg.Add(len(tasks))
	apply := func(ctx context.Context, t *worker.Task) error {
		var c change
		_ = t.Decode(&c)
		mu.Lock()
		overlap = overlap || running[c.Account]
		running[c.Account] = true
		applied[c.Account] = append(applied[c.Account], c.N)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // the work
		mu.Lock()
		running[c.Account] = false
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
		go func() { defer stopped.Done(); _ = w.Run(runCtx, worker.Handlers{"ledger.apply": apply}) }()
	}
	wg.Wait()
	stop()
	stopped.Wait()

	fmt.Println("a:", applied["a"])
	fmt.Println("b:", applied["b"])
	fmt.Println("two of one account at once:", overlap)
	// Output:
	// a: [1 2 3 4 5]
	// b: [1 2 3 4 5]
	// two of one account at once: false
}
