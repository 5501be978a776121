package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

func ExampleDependencyOutputs() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()

	// fetch fans out to two resizes; publish fans in and waits for both.
	q := queue.New(pool)
	wf, _ := q.EnqueueWorkflow(ctx, queue.Workflow{Name: "thumbnails", Steps: []queue.Step{
		{Name: "fetch", Payload: "cat.png"},
		{Name: "small", Task: "resize", Payload: 64, DependsOn: []string{"fetch"}},
		{Name: "large", Task: "resize", Payload: 512, DependsOn: []string{"fetch"}},
		{Name: "publish", DependsOn: []string{"small", "large"}},
	}})

	done := make(chan struct{})
	handlers := worker.Handlers{
		"fetch": worker.Returning(func(ctx context.Context, t *worker.Task) (string, error) {
			return "/tmp/cat.png", nil
		}),
		"resize": worker.Returning(func(ctx context.Context, t *worker.Task) (string, error) {
			var src string
			if err := worker.DependencyOutput(ctx, "fetch", &src); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s@%s", src, t.Payload), nil
		}),
		"publish": func(ctx context.Context, t *worker.Task) error {
			defer close(done)
			deps, err := worker.DependencyOutputs(ctx)
			if err != nil {
				return err
			}
			var got []string
			for _, d := range deps {
				var s string
				d.Decode(&s)
				got = append(got, d.Step+": "+s)
			}
			fmt.Println("publishing", strings.Join(got, ", "))
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

	info, _ := q.GetWorkflow(context.Background(), wf.ID)
	for _, t := range info.Tasks {
		fmt.Println(info.Steps[t.ID], t.Status)
	}
	// Output:
	// publishing small: /tmp/cat.png@64, large: /tmp/cat.png@512
	// fetch completed
	// small completed
	// large completed
	// publish completed
}
