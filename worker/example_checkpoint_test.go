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

func ExampleSaveCheckpoint() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()

	q := queue.New(pool)
	id, _ := q.Enqueue(ctx, "import", nil)

	type cursor struct {
		Page int `json:"page"`
	}
	done := make(chan struct{})
	handlers := worker.Handlers{
		"import": func(ctx context.Context, t *worker.Task) error {
			var c cursor
			if found, err := worker.LoadCheckpoint(ctx, &c); err != nil {
				return err
			} else if found {
				fmt.Printf("attempt %d resumes at page %d\n", t.Attempt, c.Page)
			}
			for ; c.Page < 3; c.Page++ {
				if t.Attempt == 1 && c.Page == 2 {
					return errors.New("the source went away") // retried
				}
				// ... import page c.Page ...
				if err := worker.SaveCheckpoint(ctx, cursor{Page: c.Page + 1}); err != nil {
					return err
				}
				if err := worker.SetProgress(ctx, c.Page+1); err != nil {
					return err
				}
			}
			close(done)
			return nil
		},
	}
	w := worker.New(pool, worker.Config{
		PollInterval: 10 * time.Millisecond,
		RetryBackoff: func(int) time.Duration { return 0 },
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, stop := context.WithCancel(ctx)
	finished := make(chan error)
	go func() { finished <- w.Run(ctx, handlers) }()
	<-done
	stop() // graceful: the outcome is written before Run returns
	<-finished

	task, _ := q.Get(context.Background(), id.ID)
	fmt.Println(task.Status, string(task.Progress), string(task.Checkpoint))
	// Output:
	// attempt 2 resumes at page 2
	// completed 3 {"page": 3}
}
