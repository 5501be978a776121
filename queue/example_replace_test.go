package queue_test

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

// A burst of edits to one document: each call replaces the payload of the
// pending task of key "doc:42" and moves its run time to a second after
// the call, so the document is indexed once, with the last text, a second
// after the last edit.
func ExampleWithDebounce() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	var first int64
	for _, text := range []string{"h", "he", "hel", "hello"} {
		res, err := q.Enqueue(ctx, "doc.index", map[string]string{"text": text},
			queue.WithDebounce("doc:42", time.Second))
		if err != nil {
			fmt.Println(err)
			return
		}
		if first == 0 {
			first = res.ID
		}
		fmt.Printf("%-5s replaced: %-5v same task: %v\n", text, res.Replaced, res.ID == first)
	}

	ran := make(chan string, 10)
	w := worker.New(pool, worker.Config{PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(runCtx, worker.Handlers{"doc.index": func(ctx context.Context, t *worker.Task) error {
			ran <- string(t.Payload)
			return nil
		}})
	}()
	fmt.Println("indexed:", <-ran)
	stop()
	<-done
	fmt.Println("indexed again:", len(ran) > 0)
	// Output:
	// h     replaced: false same task: true
	// he    replaced: true  same task: true
	// hel   replaced: true  same task: true
	// hello replaced: true  same task: true
	// indexed: {"text": "hello"}
	// indexed again: false
}
