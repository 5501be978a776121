package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// Workflow.Options apply to every step; a step's own options win, option
// by option.
func TestWorkflowOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	enq, err := c.EnqueueWorkflow(ctx, queue.Workflow{
		Name:              "render",
		DependencyFailure: queue.DependencyFailureWait,
		Options: []queue.Option{
			queue.WithQueue("media"), queue.WithPriority(-2), queue.WithMaxAttempts(3),
			queue.WithTimeout(2 * time.Second), queue.WithMetadata(json.RawMessage(`{"tenant":"ada"}`)),
			queue.WithRunAt(at), queue.WithExclusiveKey("render:ada"), queue.WithLimitKey("tenant:ada"),
			queue.WithDependencyFailure(queue.DependencyFailureCancel),
		},
		Steps: []queue.Step{
			{Name: "plain"},
			{Name: "own", DependsOn: []string{"plain"}, Options: []queue.Option{
				queue.WithQueue("gpu"), queue.WithPriority(5), queue.WithMaxAttempts(1),
				queue.WithTimeout(time.Minute), queue.WithMetadata(json.RawMessage(`{"gpu":true}`)),
				queue.WithRunAt(at.Add(time.Hour)), queue.WithExclusiveKey("gpu"), queue.WithLimitKey("tenant:bob"),
				queue.WithDependencyFailure(queue.DependencyFailureWait),
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		queue, metadata, exclusive, limit, depFailure string
		priority, maxAttempts                         int
		timeout                                       time.Duration
		runAt                                         time.Time
	}
	for step, w := range map[string]want{
		// WithDependencyFailure in Options overrides the DependencyFailure
		// field.
		"plain": {"media", `{"tenant": "ada"}`, "render:ada", "tenant:ada", "cancel", -2, 3, 2 * time.Second, at},
		"own":   {"gpu", `{"gpu": true}`, "gpu", "tenant:bob", "wait", 5, 1, time.Minute, at.Add(time.Hour)},
	} {
		task, err := c.Get(ctx, enq.TaskIDs[step])
		if err != nil {
			t.Fatal(err)
		}
		if task.Queue != w.queue || string(task.Metadata) != w.metadata || task.ExclusiveKey != w.exclusive ||
			task.Priority != w.priority || task.MaxAttempts != w.maxAttempts || task.Timeout != w.timeout ||
			!task.RunAt.Equal(w.runAt) || task.WorkflowID != enq.ID {
			t.Errorf("step %q = %+v, want %+v", step, task, w)
		}
		var limit, depFailure string
		err = pool.QueryRow(ctx, `SELECT coalesce(limit_key, ''), coalesce(dependency_failure, '') FROM skiplock_tasks WHERE id = $1`,
			enq.TaskIDs[step]).Scan(&limit, &depFailure)
		if err != nil {
			t.Fatal(err)
		}
		if limit != w.limit || depFailure != w.depFailure {
			t.Errorf("step %q: limit key %q, dependency failure %q; want %q, %q", step, limit, depFailure, w.limit, w.depFailure)
		}
	}

	// WithDelay counts from the enqueue, for a waiting step as for the
	// first.
	enq, err = c.EnqueueWorkflow(ctx, queue.Workflow{
		Options: []queue.Option{queue.WithDelay(time.Hour)},
		Steps:   []queue.Step{{Name: "a"}, {Name: "b", DependsOn: []string{"a"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"a", "b"} {
		task, err := c.Get(ctx, enq.TaskIDs[step])
		if err != nil {
			t.Fatal(err)
		}
		if d := task.RunAt.Sub(task.CreatedAt); d < time.Hour-time.Second || d > time.Hour+time.Second || task.Queue != queue.DefaultQueue {
			t.Errorf("step %q runs %s after it was enqueued, in %q; want 1h, in %q", step, d, task.Queue, queue.DefaultQueue)
		}
	}
}

// Options that name one task are refused in Workflow.Options, by name, as
// are invalid ones, even when every step overrides them; nothing is
// inserted.
func TestWorkflowOptionsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	for _, tc := range []struct {
		opt  queue.Option
		want string
	}{
		{queue.WithUniqueKey("k"), "WithUniqueKey does not apply to a whole workflow"},
		{queue.WithUnique(), "WithUnique does not apply to a whole workflow"},
		{queue.WithUniqueWindow(time.Hour), "WithUniqueWindow does not apply to a whole workflow"},
		{queue.WithSequence("k"), "WithSequence does not apply to a whole workflow"},
		{queue.WithSequenceHold(), "WithSequenceHold does not apply to a whole workflow"},
		{queue.WithDependsOn(1), "WithDependsOn does not apply to a whole workflow (use Step.DependsOn)"},
		{queue.WithPriority(math.MaxInt16 + 1), "Workflow.Options: skiplock: invalid task: priority"},
		{queue.WithMetadata(json.RawMessage(`[1]`)), "Workflow.Options: skiplock: invalid task: metadata must be a JSON object"},
	} {
		_, err := c.EnqueueWorkflow(ctx, queue.Workflow{
			Name:    "wf",
			Options: []queue.Option{queue.WithQueue("media"), tc.opt},
			Steps:   []queue.Step{{Name: "a", Options: []queue.Option{queue.WithPriority(0), queue.WithMetadata(nil)}}},
		})
		if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("EnqueueWorkflow: %v, want ErrInvalidTask with %q", err, tc.want)
		}
	}
	if n := count(t, pool, "true"); n != 0 {
		t.Fatalf("%d tasks inserted by invalid workflows", n)
	}
}

type resizeArgs struct {
	Size int `json:"size"`
}

func (resizeArgs) TaskName() string { return "image.resize" }

func (resizeArgs) TaskOptions() []queue.Option {
	return []queue.Option{queue.WithQueue("images"), queue.WithMaxAttempts(7)}
}

// A step's TaskArgs payload is only its payload: the type's TaskOptions
// are not applied unless the step passes them, and then, as any step
// option, they win over the workflow's Options.
func TestWorkflowOptionsTaskDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	args := resizeArgs{Size: 64}
	enq, err := c.EnqueueWorkflow(ctx, queue.Workflow{
		Options: []queue.Option{queue.WithQueue("media"), queue.WithMaxAttempts(3), queue.WithPriority(4)},
		Steps: []queue.Step{
			{Name: "bare", Task: args.TaskName(), Payload: args},
			{Name: "typed", Task: args.TaskName(), Payload: args, Options: args.TaskOptions()},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for step, w := range map[string]struct {
		queue       string
		maxAttempts int
	}{"bare": {"media", 3}, "typed": {"images", 7}} {
		task, err := c.Get(ctx, enq.TaskIDs[step])
		if err != nil {
			t.Fatal(err)
		}
		if task.Name != "image.resize" || task.Queue != w.queue || task.MaxAttempts != w.maxAttempts || task.Priority != 4 ||
			string(task.Payload) != `{"size": 64}` {
			t.Errorf("step %q = %+v, want queue %q, %d attempts, priority 4", step, task, w.queue, w.maxAttempts)
		}
	}
}

// WithLimitKey is kept on a task enqueued WithDependsOn.
func TestDependsOnLimitKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	a, err := c.Enqueue(ctx, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Enqueue(ctx, "b", nil, queue.WithDependsOn(a.ID), queue.WithLimitKey("tenant:ada"))
	if err != nil {
		t.Fatal(err)
	}
	var key string
	if err := pool.QueryRow(ctx, `SELECT coalesce(limit_key, '') FROM skiplock_tasks WHERE id = $1`, b.ID).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if key != "tenant:ada" {
		t.Fatalf("limit key of the dependent = %q, want tenant:ada", key)
	}
}
