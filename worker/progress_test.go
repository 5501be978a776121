package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// A handler that saves checkpoints and fails, by an error or a panic,
// resumes on its retry from the last checkpoint it saved.
func TestCheckpointResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	type cursor struct {
		Next int `json:"next"`
	}
	var mu sync.Mutex
	seen := map[string][]string{} // per task name: what each attempt loaded, then the items it did
	handler := func(crash func()) worker.Handler {
		return func(ctx context.Context, task *worker.Task) error {
			var c cursor
			found, err := worker.LoadCheckpoint(ctx, &c)
			if err != nil {
				return err
			}
			mu.Lock()
			seen[task.Name] = append(seen[task.Name], fmt.Sprintf("attempt %d loaded %v %d", task.Attempt, found, c.Next))
			mu.Unlock()
			for ; c.Next < 5; c.Next++ {
				if task.Attempt == 1 && c.Next == 3 {
					crash()
					return errors.New("the source went away")
				}
				mu.Lock()
				seen[task.Name] = append(seen[task.Name], fmt.Sprint("item ", c.Next))
				mu.Unlock()
				if err := worker.SaveCheckpoint(ctx, cursor{Next: c.Next + 1}); err != nil {
					return err
				}
				if err := worker.SetProgress(ctx, map[string]int{"done": c.Next + 1, "total": 5}); err != nil {
					return err
				}
			}
			return nil
		}
	}
	handlers := worker.Handlers{
		"fails":  handler(func() {}),
		"panics": handler(func() { panic("crash") }),
	}
	ids := map[string]int64{}
	for name := range handlers {
		id, err := b.client.Enqueue(ctx, name, nil, queue.WithMaxAttempts(3))
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id.ID
	}
	start(t, b.pool, worker.Config{}, handlers)
	waitFor(t, 2*time.Second, "both tasks completed", func() bool { return b.count(t, "status = 'completed'") == 2 })

	want := "attempt 1 loaded false 0, item 0, item 1, item 2, attempt 2 loaded true 3, item 3, item 4"
	mu.Lock()
	defer mu.Unlock()
	for name, id := range ids {
		if got := strings.Join(seen[name], ", "); got != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
		task, err := b.client.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		// Both are kept once the task completes.
		if task.Attempt != 2 || string(task.Checkpoint) != `{"next": 5}` || string(task.Progress) != `{"done": 5, "total": 5}` {
			t.Errorf("%s: attempt %d, checkpoint %s, progress %s", name, task.Attempt, task.Checkpoint, task.Progress)
		}
	}
}

// Progress is written at once: queue.Get reads it while the handler runs.
func TestProgressWhileRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	reported, release := make(chan struct{}), make(chan struct{})
	id, err := b.client.Enqueue(ctx, "long", nil)
	if err != nil {
		t.Fatal(err)
	}
	start(t, b.pool, worker.Config{}, worker.Handlers{"long": func(ctx context.Context, task *worker.Task) error {
		if err := worker.SetProgress(ctx, 0.4); err != nil {
			return err
		}
		if err := worker.SaveCheckpoint(ctx, "page-7"); err != nil {
			return err
		}
		close(reported)
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return worker.SetProgress(ctx, 1)
	}})
	<-reported
	running, err := b.client.Get(ctx, id.ID)
	if err != nil {
		t.Fatal(err)
	}
	if running.Status != queue.StatusRunning || string(running.Progress) != "0.4" || string(running.Checkpoint) != `"page-7"` {
		t.Errorf("while running: %s, progress %s, checkpoint %s", running.Status, running.Progress, running.Checkpoint)
	}
	list, err := b.client.List(ctx, queue.Filter{Statuses: []queue.Status{queue.StatusRunning}}, queue.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || string(list[0].Progress) != "0.4" {
		t.Errorf("List: %+v", list)
	}
	close(release)
	waitFor(t, time.Second, "the task completed", func() bool { return b.count(t, "status = 'completed' AND progress = '1'") == 1 })
}

// A write after the task was taken from this attempt returns ErrNotHeld
// and changes nothing; a value over the limit returns ErrProgressTooLarge,
// writes nothing and does not fail the task; null clears.
func TestProgressErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	started, taken := make(chan int64, 1), make(chan struct{})
	errs := make(chan []error, 1)
	var once sync.Once
	handlers := worker.Handlers{
		"taken": func(ctx context.Context, task *worker.Task) error {
			first := false
			once.Do(func() { first = true })
			if !first {
				return nil // run again after a rescue: nothing to check
			}
			started <- task.ID
			<-taken
			var v any
			_, loadErr := worker.LoadCheckpoint(ctx, &v)
			errs <- []error{worker.SetProgress(ctx, 1), worker.SaveCheckpoint(ctx, 1), loadErr}
			return nil
		},
		"limits": func(ctx context.Context, task *worker.Task) error {
			if err := worker.SetProgress(ctx, strings.Repeat("x", 200)); !errors.Is(err, worker.ErrProgressTooLarge) ||
				!strings.Contains(err.Error(), "progress is 202 bytes, over the limit of 100 (worker.Config.MaxOutputSize)") {
				return fmt.Errorf("SetProgress too large = %v", err)
			}
			if err := worker.SaveCheckpoint(ctx, strings.Repeat("x", 200)); !errors.Is(err, worker.ErrProgressTooLarge) {
				return fmt.Errorf("SaveCheckpoint too large = %v", err)
			}
			if err := worker.SaveCheckpoint(ctx, func() {}); err == nil || !strings.Contains(err.Error(), "cannot be encoded as JSON") {
				return fmt.Errorf("SaveCheckpoint unencodable = %v", err)
			}
			if err := worker.SetProgress(ctx, 3); err != nil {
				return err
			}
			if err := worker.SaveCheckpoint(ctx, 3); err != nil {
				return err
			}
			if err := worker.SaveCheckpoint(ctx, nil); err != nil { // clears
				return err
			}
			var v int
			if found, err := worker.LoadCheckpoint(ctx, &v); found || err != nil {
				return fmt.Errorf("LoadCheckpoint after clearing = %v, %v", found, err)
			}
			return nil
		},
	}
	limits, err := b.client.Enqueue(ctx, "limits", nil, queue.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Enqueue(ctx, "taken", nil); err != nil {
		t.Fatal(err)
	}
	start(t, b.pool, worker.Config{MaxOutputSize: 100}, handlers)

	id := <-started
	if _, err := b.pool.Exec(ctx, "UPDATE skiplock_tasks SET worker_id = 'another' WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	close(taken)
	for i, err := range <-errs {
		if !errors.Is(err, worker.ErrNotHeld) {
			t.Errorf("call %d after the task was taken = %v, want ErrNotHeld", i, err)
		}
	}
	if n := b.count(t, "id = $1 AND progress IS NULL AND checkpoint IS NULL", id); n != 1 {
		t.Errorf("a write after the task was taken changed it")
	}

	waitFor(t, time.Second, "the limits task finished", func() bool {
		return b.count(t, "id = $1 AND status <> 'running' AND status <> 'pending'", limits.ID) == 1
	})
	task, err := b.client.Get(ctx, limits.ID)
	if err != nil {
		t.Fatal(err)
	}
	if task.Status != queue.StatusCompleted || string(task.Progress) != "3" || task.Checkpoint != nil {
		t.Errorf("limits: %s, progress %s, checkpoint %s, errors %+v", task.Status, task.Progress, task.Checkpoint, task.Errors)
	}
}

func TestProgressOutsideHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var v any
	_, loadErr := worker.LoadCheckpoint(ctx, &v)
	for name, err := range map[string]error{
		"SetProgress":    worker.SetProgress(ctx, 1),
		"SaveCheckpoint": worker.SaveCheckpoint(ctx, 1),
		"LoadCheckpoint": loadErr,
	} {
		if err == nil || !strings.Contains(err.Error(), name+" called outside a task handler") {
			t.Errorf("%s outside a handler = %v", name, err)
		}
	}
}
