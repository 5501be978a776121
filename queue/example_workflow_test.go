package queue_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// Workflow.Options apply to every step, so that no step lands in the
// default queue by omission; a step's own options win.
func ExampleWorkflow_options() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	wf, _ := q.EnqueueWorkflow(ctx, queue.Workflow{
		Name:    "thumbnails",
		Options: []queue.Option{queue.WithQueue("media"), queue.WithMaxAttempts(3)},
		Steps: []queue.Step{
			{Name: "fetch", Payload: "cat.png"},
			{Name: "resize", Payload: 64, DependsOn: []string{"fetch"},
				Options: []queue.Option{queue.WithQueue("gpu")}},
			{Name: "publish", DependsOn: []string{"resize"}},
		},
	})
	info, _ := q.GetWorkflow(ctx, wf.ID)
	for _, t := range info.Tasks {
		fmt.Println(info.Label(t.ID), t.Queue, t.MaxAttempts, t.Status)
	}

	// An option that names one task does not apply to a whole workflow.
	_, err := q.EnqueueWorkflow(ctx, queue.Workflow{
		Options: []queue.Option{queue.WithUniqueKey("thumbnails:cat")},
		Steps:   []queue.Step{{Name: "fetch"}},
	})
	fmt.Println(errors.Is(err, queue.ErrInvalidTask), err)
	// Output:
	// fetch media 3 pending
	// resize gpu 3 waiting
	// publish media 3 waiting
	// true workflow "": Workflow.Options: skiplock: invalid task: WithUniqueKey does not apply to a whole workflow (every step but one would be a duplicate)
}
