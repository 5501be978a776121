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

func ExampleSetOutput() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()

	q := queue.New(pool)
	id, _ := q.Enqueue(ctx, "resize", map[string]string{"image": "cat.png"})

	type thumb struct {
		URL   string `json:"url"`
		Width int    `json:"width"`
	}
	done := make(chan struct{})
	handlers := worker.Handlers{
		// worker.Returning records the returned value; a handler can also
		// call worker.SetOutput(ctx, v) itself.
		"resize": worker.Returning(func(ctx context.Context, t *worker.Task) (thumb, error) {
			defer close(done)
			return thumb{URL: "s3://thumbs/cat.png", Width: 128}, nil
		}),
	}
	w := worker.New(pool, worker.Config{
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, stop := context.WithCancel(ctx)
	finished := make(chan error)
	go func() { finished <- w.Run(ctx, handlers) }()
	<-done
	stop() // graceful: the outcome, output included, is written before Run returns
	<-finished

	task, _ := q.Get(context.Background(), id.ID)
	fmt.Println(task.Status, string(task.Output))
	// Output:
	// completed {"url": "s3://thumbs/cat.png", "width": 128}
}
