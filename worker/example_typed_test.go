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

// Email is a typed task: the type names its task and carries its defaults.
type Email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (Email) TaskName() string { return "email.send" }

func (Email) TaskOptions() []queue.Option {
	return []queue.Option{queue.WithQueue("mail"), queue.WithMaxAttempts(5), queue.WithTimeout(30 * time.Second)}
}

func ExampleHandle() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()

	q := queue.New(pool)
	// Name, queue, max attempts and timeout come from the type; the call
	// may override any of them.
	id, _ := q.EnqueueArgs(ctx, Email{To: "ada@example.com", Subject: "Welcome"}, queue.WithPriority(-1))

	done := make(chan struct{})
	handlers := worker.Handlers{}
	worker.Handle(handlers, func(ctx context.Context, t *worker.TaskOf[Email]) error {
		fmt.Printf("to %s: %s (task %s in queue %s)\n", t.Args.To, t.Args.Subject, t.Name, t.Queue)
		close(done)
		return nil
	})
	w := worker.New(pool, worker.Config{Queues: []string{"mail"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, stop := context.WithCancel(ctx)
	finished := make(chan error)
	go func() { finished <- w.Run(ctx, handlers) }()
	<-done
	stop()
	<-finished

	task, _ := q.Get(context.Background(), id.ID)
	fmt.Println(task.Status, "max attempts", task.MaxAttempts, "timeout", task.Timeout, "priority", task.Priority)
	// Output:
	// to ada@example.com: Welcome (task email.send in queue mail)
	// completed max attempts 5 timeout 30s priority -1
}
