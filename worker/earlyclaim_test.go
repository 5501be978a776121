package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TestHandedOnTaskSeesCarriedOutcome: a chain of tasks under one exclusive
// key, each depending on the one before, is handed on in the claims that
// carry each outcome, whose next task may start before that commit
// returns. What each handler reads through its context (DependencyOutputs,
// LoadCheckpoint) is what the committed claim says: the task before it
// completed with its output, and this one running.
func TestHandedOnTaskSeesCarriedOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 30
	ids := make([]int64, 0, n)
	for i := range n {
		opts := []queue.Option{queue.WithExclusiveKey("k")}
		if i > 0 {
			opts = append(opts, queue.WithDependsOn(ids[i-1]))
		}
		ids = append(ids, b.enqueue(t, "step", i, opts...))
	}
	var mu sync.Mutex
	var problems []string
	note := func(s string) {
		mu.Lock()
		problems = append(problems, s)
		mu.Unlock()
	}
	step := func(ctx context.Context, task *worker.Task) error {
		var i int
		if err := task.Decode(&i); err != nil {
			return worker.Permanent(err)
		}
		if _, err := worker.LoadCheckpoint(ctx, new(json.RawMessage)); err != nil {
			note("step " + string(task.Payload) + ": LoadCheckpoint: " + err.Error())
		}
		deps, err := worker.DependencyOutputs(ctx)
		switch {
		case err != nil:
			note("step " + string(task.Payload) + ": DependencyOutputs: " + err.Error())
		case i == 0 && len(deps) != 0, i > 0 && len(deps) != 1:
			note("step " + string(task.Payload) + ": wrong number of dependencies")
		case i > 0 && (deps[0].Status != queue.StatusCompleted || string(deps[0].Output) != strconv.Itoa(i-1)):
			note("step " + string(task.Payload) + ": the step before is " + string(deps[0].Status) + " with output " + string(deps[0].Output))
		}
		return worker.SetOutput(ctx, i)
	}
	cfg := worker.Config{PollInterval: time.Hour}
	worker.SetHandoffWait(&cfg, time.Hour) // every outcome but the last rides a claim
	start(t, b.pool, cfg, worker.Handlers{"step": step})
	pgtest.Eventually(t, 60*time.Second, "every step to complete", func() bool {
		return b.count(t, "status = 'completed'") == n
	})
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
}

// TestHandedOnTaskWhoseClaimFailsToCommit: when the commit of a claim that
// carried an outcome fails after the claimed task was handed to its
// handler (here a deferred trigger refuses it once), the lock session is
// closed and the task's handler, if it began, is cancelled as a lost
// lock's: nothing of the claim or of the outcome it carried was written.
// The completer then writes the outcome, the session comes back, and the
// task runs again, on its first attempt; nothing is lost or run twice to
// completion.
func TestHandedOnTaskWhoseClaimFailsToCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `
CREATE SEQUENCE refuse_once;
CREATE FUNCTION refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.name = 'second' AND NEW.status = 'running' THEN
		IF nextval('refuse_once') = 1 THEN
			RAISE EXCEPTION 'commit refused for the test';
		END IF;
	END IF;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER refuse_claim AFTER UPDATE ON skiplock_tasks
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_claim();`)
	if err != nil {
		t.Fatal(err)
	}
	first := b.enqueue(t, "first", nil, queue.WithExclusiveKey("k"))
	second := b.enqueue(t, "second", nil, queue.WithExclusiveKey("k"))

	var mu sync.Mutex
	var firstRuns, secondDone int
	var secondCancelled []error
	handlers := worker.Handlers{
		"first": func(context.Context, *worker.Task) error {
			mu.Lock()
			firstRuns++
			mu.Unlock()
			return nil
		},
		"second": func(ctx context.Context, _ *worker.Task) error {
			// Its claim's commit has returned within a second, or the
			// session has closed: the context says which.
			select {
			case <-ctx.Done():
				mu.Lock()
				secondCancelled = append(secondCancelled, context.Cause(ctx))
				mu.Unlock()
				return ctx.Err()
			case <-time.After(time.Second):
			}
			mu.Lock()
			secondDone++
			mu.Unlock()
			return nil
		},
	}
	var logs logBuffer
	cfg := worker.Config{PollInterval: 200 * time.Millisecond, Logger: logs.logger(io.Discard)}
	worker.SetHandoffWait(&cfg, time.Hour)
	start(t, b.pool, cfg, handlers)
	pgtest.Eventually(t, 60*time.Second, "both tasks to complete", func() bool {
		return b.count(t, "status = 'completed'") == 2
	})

	if !strings.Contains(logs.String(), "lock session lost") || !strings.Contains(logs.String(), "commit refused for the test") {
		t.Errorf("the refused commit did not close the lock session; the log:\n%s", logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if firstRuns != 1 || secondDone != 1 {
		t.Errorf("first ran %d times, second completed %d times; want 1 and 1", firstRuns, secondDone)
	}
	for _, cause := range secondCancelled {
		if cause == nil || !strings.Contains(cause.Error(), "lost the lock session") {
			t.Errorf("second's first handler was cancelled with %v, want the lost lock session", cause)
		}
	}
	for _, id := range []int64{first, second} {
		if task := b.get(t, id); task.Attempt != 1 {
			t.Errorf("task %d (%s) completed on attempt %d, want 1: the refused claim wrote nothing", id, task.Name, task.Attempt)
		}
	}
}

// TestHandedOnPlacesWhileLockSessionsDie: tasks under three exclusive keys,
// worked by two workers whose lock sessions are terminated again and
// again, some between a carrying claim's rows and its commit. Every task
// completes, none fails, and every handler call that did not complete its
// task was cancelled with the lost lock.
func TestHandedOnPlacesWhileLockSessionsDie(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const keys, perKey = 3, 40
	tasks := make([]queue.NewTask, 0, keys*perKey)
	for i := range keys * perKey {
		tasks = append(tasks, queue.NewTask{Name: "keyed", Payload: i,
			Options: []queue.Option{queue.WithExclusiveKey("k" + strconv.Itoa(i%keys))}})
	}
	if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	completed := map[int64]int{}
	var otherErrs []error
	keyed := func(ctx context.Context, task *worker.Task) error {
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); cause == nil || !strings.Contains(cause.Error(), "lost the lock session") {
				mu.Lock()
				otherErrs = append(otherErrs, cause)
				mu.Unlock()
			}
			return ctx.Err()
		case <-time.After(3 * time.Millisecond):
		}
		mu.Lock()
		completed[task.ID]++
		mu.Unlock()
		return nil
	}
	var logs logBuffer
	prefix := "early-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range 2 {
		cfg := worker.Config{WorkerID: prefix + "-" + strconv.Itoa(i), Logger: logs.logger(io.Discard)}
		start(t, b.pool, cfg, worker.Handlers{"keyed": keyed})
	}
	for kill := 0; kill < 8 && b.count(t, "status = 'completed'") < keys*perKey; kill++ {
		time.Sleep(150 * time.Millisecond)
		if _, err := b.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = 'skiplock lock session ' || $1`, prefix+"-"+strconv.Itoa(kill%2)); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.Eventually(t, 60*time.Second, "every task to complete", func() bool {
		return b.count(t, "status = 'completed'") == keys*perKey
	})
	if n := b.count(t, "status <> 'completed'"); n != 0 {
		t.Errorf("%d tasks did not complete", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(completed) != keys*perKey {
		t.Errorf("handlers completed %d distinct tasks, want %d", len(completed), keys*perKey)
	}
	for _, err := range otherErrs {
		t.Errorf("a handler was cancelled with %v, want the lost lock session", err)
	}
	if !strings.Contains(logs.String(), "lock session lost") {
		t.Errorf("no lock session was lost; the log:\n%s", logs.String())
	}
}
