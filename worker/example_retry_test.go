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

var (
	errAccountGone = errors.New("account 42 was deleted")
	errThrottled   = errors.New("429 Too Many Requests")
)

func ExampleConfig_onError() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	w := worker.New(pool, worker.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		// crm.push gets 3 attempts whatever its producer set, a minute apart.
		Retry: map[string]worker.RetryPolicy{
			"crm.push": {MaxAttempts: 3, Backoff: func(int) time.Duration { return time.Minute }},
		},
		OnError: func(ctx context.Context, t *worker.Task, err error) error {
			switch {
			case errors.Is(err, errAccountGone):
				return worker.Cancel(err) // not worth doing any more
			case errors.Is(err, errThrottled):
				return worker.Snooze(10 * time.Minute) // later, without spending the attempt
			}
			return err // retried by the policy
		},
	})
	handlers := worker.Handlers{"crm.push": func(ctx context.Context, t *worker.Task) error {
		switch string(t.Payload) {
		case `"gone"`:
			return fmt.Errorf("pushing: %w", errAccountGone)
		case `"busy"`:
			return errThrottled
		}
		return errors.New("connection reset")
	}}
	for _, p := range []string{"gone", "busy", "flaky"} {
		id, _ := q.Enqueue(ctx, "crm.push", p)
		res, _ := w.RunTask(ctx, handlers, id.ID) // one attempt, as Run would make it
		fmt.Printf("%s: %s, %s\n", p, res.Outcome, res.Status)
	}
	// Output:
	// gone: cancelled, cancelled
	// busy: snoozed, scheduled
	// flaky: error, retrying
}

func ExampleWorker_StopAndCancel() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)
	id, _ := q.Enqueue(ctx, "video.encode", nil)

	running := make(chan struct{})
	w := worker.New(pool, worker.Config{ShutdownGrace: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	finished := make(chan error)
	go func() {
		finished <- w.Run(ctx, worker.Handlers{"video.encode": func(ctx context.Context, t *worker.Task) error {
			close(running)
			<-ctx.Done() // cancelled by StopAndCancel
			return ctx.Err()
		}})
	}()
	<-running
	// No hour of grace: the handler's context is cancelled now, and its task
	// goes back to pending with its attempt given back.
	if err := w.StopAndCancel(ctx); err != nil {
		panic(err)
	}
	<-finished

	task, _ := q.Get(ctx, id.ID)
	fmt.Println(task.Status, "attempt", task.Attempt, "history:", task.Errors[0].Outcome)
	// Output:
	// pending attempt 0 history: shutdown
}
