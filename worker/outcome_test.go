// What an attempt comes to: retries, exhausted attempts, permanent errors,
// panics and unknown task names, as the task's row records them.

package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

func TestRetryThenSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, "flaky", nil, queue.WithMaxAttempts(5))
	var calls atomic.Int32
	start(t, b.pool, worker.Config{}, worker.Handlers{"flaky": func(ctx context.Context, task *worker.Task) error {
		if calls.Add(1) < 3 {
			return fmt.Errorf("transient failure %d", task.Attempt)
		}
		return nil
	}})
	waitFor(t, 10*time.Second, "completion", func() bool { return b.get(t, id).Status == queue.StatusCompleted })
	task := b.get(t, id)
	if task.Attempt != 3 || len(task.Errors) != 2 {
		t.Fatalf("attempt %d with %d errors, want 3 and 2: %+v", task.Attempt, len(task.Errors), task.Errors)
	}
	for i, e := range task.Errors {
		if e.Attempt != i+1 || e.Outcome != "error" || e.Error != fmt.Sprintf("transient failure %d", i+1) {
			t.Fatalf("errors[%d] = %+v", i, e)
		}
	}
}

func TestRetriesExhausted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, "broken", nil, queue.WithMaxAttempts(3))
	polls := &claims{}
	w, _ := start(t, b.pool, worker.Config{Observer: polls}, worker.Handlers{"broken": func(ctx context.Context, task *worker.Task) error {
		return fmt.Errorf("attempt %d failed", task.Attempt)
	}})
	waitFor(t, 10*time.Second, "failure", func() bool { return b.get(t, id).Status == queue.StatusFailed })
	task := b.get(t, id)
	if task.Attempt != 3 || len(task.Errors) != 3 || task.FinishedAt == nil {
		t.Fatalf("task = %+v", task)
	}
	host, _ := os.Hostname()
	for i, e := range task.Errors {
		if e.Attempt != i+1 || e.Error != fmt.Sprintf("attempt %d failed", i+1) || e.WorkerID != w.ID() ||
			e.Host != host || e.PID != os.Getpid() || e.StartedAt.IsZero() || e.FinishedAt.Before(e.StartedAt) {
			t.Fatalf("errors[%d] = %+v", i, e)
		}
	}
	// It stays failed: the worker goes on claiming, but not it.
	waitClaims(t, 4, polls)
	if got := b.get(t, id); got.Attempt != 3 || got.Status != queue.StatusFailed {
		t.Fatalf("failed task changed: %+v", got)
	}
}

func TestPermanentError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, "decode", json.RawMessage(`{"n":"not a number"}`))
	start(t, b.pool, worker.Config{}, worker.Handlers{"decode": func(ctx context.Context, task *worker.Task) error {
		var p struct{ N int }
		return task.Decode(&p)
	}})
	waitFor(t, 10*time.Second, "failure", func() bool { return b.get(t, id).Status == queue.StatusFailed })
	task := b.get(t, id)
	if task.Attempt != 1 || !strings.Contains(task.Errors[0].Error, "decoding payload") {
		t.Fatalf("task = %+v", task)
	}
}

func TestPanicIsFailureWithStack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, "panics", nil, queue.WithMaxAttempts(1))
	start(t, b.pool, worker.Config{}, worker.Handlers{"panics": func(ctx context.Context, task *worker.Task) error {
		var m map[string]int
		m["boom"]++ // nil map write
		return nil
	}})
	waitFor(t, 10*time.Second, "failure", func() bool { return b.get(t, id).Status == queue.StatusFailed })
	e := b.get(t, id).Errors[0]
	if e.Outcome != "panic" || !strings.Contains(e.Error, "panic: assignment to entry in nil map") ||
		!strings.Contains(e.Error, "outcome_test.go") {
		t.Fatalf("error entry lacks the panic and its stack: %+v", e)
	}
}
