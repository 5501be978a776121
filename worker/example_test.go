package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

func ExampleWorker_Run() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()

	q := queue.New(pool)
	id, _ := q.Enqueue(ctx, "greet", map[string]string{"name": "Ada"}, queue.WithMaxAttempts(3))

	done := make(chan struct{})
	handlers := worker.Handlers{"greet": func(ctx context.Context, t *worker.Task) error {
		var p struct{ Name string }
		if err := t.Decode(&p); err != nil {
			return err
		}
		if t.Attempt == 1 {
			return errors.New("mail server busy") // retried
		}
		fmt.Printf("hello, %s (attempt %d)\n", p.Name, t.Attempt)
		close(done)
		return nil
	}}
	w := worker.New(pool, worker.Config{
		RetryBackoff: func(int) time.Duration { return 10 * time.Millisecond },
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, stop := context.WithCancel(ctx)
	finished := make(chan error)
	go func() { finished <- w.Run(ctx, handlers) }()
	<-done
	stop() // graceful: the outcome is written before Run returns
	<-finished

	task, _ := q.Get(context.Background(), id.ID)
	fmt.Println(task.Status, "after", task.Attempt, "attempts; first error:", task.Errors[0].Error)
	// Output:
	// hello, Ada (attempt 2)
	// completed after 2 attempts; first error: mail server busy
}
