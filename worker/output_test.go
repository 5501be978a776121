package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

func TestTaskOutput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	type thumb struct {
		URL   string `json:"url"`
		Bytes int    `json:"bytes"`
	}
	handlers := worker.Handlers{
		"set": func(ctx context.Context, task *worker.Task) error {
			if err := worker.SetOutput(ctx, map[string]int{"first": 1}); err != nil {
				return err
			}
			return worker.SetOutput(ctx, map[string]int{"last": 2}) // the last call wins
		},
		"returning": worker.Returning(func(ctx context.Context, task *worker.Task) (thumb, error) {
			return thumb{URL: "s3://thumbs/1.png", Bytes: 2048}, nil
		}),
		"none": func(ctx context.Context, task *worker.Task) error { return nil },
		// The first attempt records an output and fails: only a completed
		// attempt's output is kept.
		"retried": func(ctx context.Context, task *worker.Task) error {
			if task.Attempt == 1 {
				worker.SetOutput(ctx, "from the failed attempt") //nolint:errcheck
				return errors.New("flaky")
			}
			return nil
		},
		// Too large, and the handler ignores SetOutput's error: the task
		// still fails, for good, with the error.
		"large": func(ctx context.Context, task *worker.Task) error {
			worker.SetOutput(ctx, strings.Repeat("x", 200)) //nolint:errcheck
			return nil
		},
		// Too large first, then a summary that fits: the summary is kept.
		"shrunk": func(ctx context.Context, task *worker.Task) error {
			if err := worker.SetOutput(ctx, strings.Repeat("x", 200)); !errors.Is(err, worker.ErrOutputTooLarge) {
				return errors.New("want ErrOutputTooLarge")
			}
			return worker.SetOutput(ctx, json.RawMessage(`{"truncated":true}`))
		},
		"unencodable": func(ctx context.Context, task *worker.Task) error {
			worker.SetOutput(ctx, func() {}) //nolint:errcheck
			return nil
		},
	}
	ids := map[string]int64{}
	for name := range handlers {
		id, err := b.client.Enqueue(ctx, name, nil, queue.WithMaxAttempts(3))
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id.ID
	}
	start(t, b.pool, worker.Config{MaxOutputSize: 100}, handlers)
	waitFor(t, 2*time.Second, "every task finished", func() bool {
		return b.count(t, "status IN ('completed', 'failed')") == len(handlers)
	})

	get := func(name string) *queue.Task {
		t.Helper()
		task, err := b.client.Get(ctx, ids[name])
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	for name, want := range map[string]string{
		"set":       `{"last": 2}`,
		"returning": `{"url": "s3://thumbs/1.png", "bytes": 2048}`,
		"shrunk":    `{"truncated": true}`,
	} {
		if task := get(name); task.Status != queue.StatusCompleted || string(task.Output) != want {
			t.Errorf("%s: %s with output %s, want completed with %s", name, task.Status, task.Output, want)
		}
	}
	for _, name := range []string{"none", "retried"} {
		if task := get(name); task.Status != queue.StatusCompleted || task.Output != nil {
			t.Errorf("%s: %s with output %s, want completed with none", name, task.Status, task.Output)
		}
	}
	large := get("large")
	if large.Status != queue.StatusFailed || !large.FailedPermanently() || large.Output != nil || large.Attempt != 1 ||
		!strings.Contains(large.Errors[0].Error, "output is 202 bytes, over the limit of 100 (worker.Config.MaxOutputSize)") {
		t.Errorf("large: %s attempt %d output %s errors %+v", large.Status, large.Attempt, large.Output, large.Errors)
	}
	if bad := get("unencodable"); bad.Status != queue.StatusFailed || !strings.Contains(bad.Errors[0].Error, "cannot be encoded as JSON") {
		t.Errorf("unencodable: %s errors %+v", bad.Status, bad.Errors)
	}
}

func TestSetOutputOutsideHandler(t *testing.T) {
	t.Parallel()
	if err := worker.SetOutput(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "outside a task handler") {
		t.Fatalf("SetOutput outside a handler = %v", err)
	}
}

// The output travels in the completer's batched write: many tasks, many
// batches, every output where it belongs.
func TestTaskOutputBatched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	tasks := make([]queue.NewTask, 2000)
	for i := range tasks {
		tasks[i] = queue.NewTask{Name: "echo", Payload: i}
	}
	if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	start(t, b.pool, worker.Config{}, worker.Handlers{"echo": worker.Returning(func(ctx context.Context, task *worker.Task) (map[string]json.RawMessage, error) {
		return map[string]json.RawMessage{"echo": task.Payload}, nil
	})})
	waitFor(t, 5*time.Second, "every task completed", func() bool { return b.count(t, "status = 'completed'") == len(tasks) })
	if n := b.count(t, "output->'echo' IS DISTINCT FROM payload"); n != 0 {
		t.Fatalf("%d tasks lack their own output", n)
	}
}
