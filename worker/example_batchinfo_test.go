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

func ExampleBatchInfo() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()

	// Three imports, one of which fails for good. The report runs once
	// all three have finished, however they ended; the announcement only
	// if all three completed.
	q := queue.New(pool)
	b := queue.Batch{
		Name:      "nightly import",
		OnFinish:  queue.NewTask{Name: "report"},
		OnSuccess: queue.NewTask{Name: "announce"},
	}
	b.Add("import", "a.csv").Add("import", "b.csv").Add("import", "broken.csv")
	enq, _ := q.EnqueueBatch(ctx, b)

	done := make(chan struct{})
	handlers := worker.Handlers{
		"import": func(ctx context.Context, t *worker.Task) error {
			if string(t.Payload) == `"broken.csv"` {
				return worker.Permanent(errors.New("unreadable file"))
			}
			return nil
		},
		"report": func(ctx context.Context, t *worker.Task) error {
			defer close(done)
			info, err := worker.BatchInfo(ctx)
			if err != nil {
				return err
			}
			fmt.Printf("%s: %d completed, %d failed, %d cancelled of %d\n",
				info.Name, info.Completed, info.Failed, info.Cancelled, info.Total)
			return nil
		},
		"announce": func(ctx context.Context, t *worker.Task) error {
			fmt.Println("all imported")
			return nil
		},
	}
	w := worker.New(pool, worker.Config{
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, stop := context.WithCancel(ctx)
	finished := make(chan error)
	go func() { finished <- w.Run(ctx, handlers) }()
	<-done
	stop()
	<-finished

	announce, _ := q.Get(context.Background(), enq.OnSuccessTaskID)
	fmt.Println("announce:", announce.Status)
	// Output:
	// nightly import: 2 completed, 1 failed, 0 cancelled of 3
	// announce: cancelled
}
