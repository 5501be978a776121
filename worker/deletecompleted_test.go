package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// A worker with DeleteCompleted deletes the tasks it completes, each once,
// and keeps as completed every task that something reads afterwards: a
// task with dependents, a sequence's tasks, a batch's members, a task with
// a windowed unique key (whose key still refuses a duplicate in its
// window), a task that recorded an output. A failed task stays failed. A
// plain unique key is free again once its task is gone.
func TestDeleteCompleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	plain := b.enqueueMany(t, "plain", 300)
	enqueue := func(name string, opts ...queue.Option) int64 {
		t.Helper()
		id, err := b.client.Enqueue(ctx, name, map[string]any{}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return id.ID
	}
	failing := enqueue("fails", queue.WithMaxAttempts(1))
	withOutput := enqueue("outputs")
	parent := enqueue("plain")
	child := enqueue("plain", queue.WithDependsOn(parent))
	seq := []int64{enqueue("plain", queue.WithSequence("s")), enqueue("plain", queue.WithSequence("s"))}
	batch, err := b.client.EnqueueBatch(ctx, queue.Batch{Tasks: []queue.NewTask{{Name: "plain"}, {Name: "plain"}}})
	if err != nil {
		t.Fatal(err)
	}
	window := []queue.Option{queue.WithUniqueKey("w"), queue.WithUniqueWindow(10000 * time.Hour)}
	windowed := enqueue("plain", window...)
	unique := enqueue("plain", queue.WithUniqueKey("u"))
	kept := append([]int64{withOutput, parent, child, windowed}, seq...)
	kept = append(kept, batch.TaskIDs...)
	gone := append([]int64{unique}, plain...)
	all := len(kept) + len(gone) + 1

	var mu sync.Mutex
	runs := map[int64]int{}
	ran := func(id int64) int {
		mu.Lock()
		defer mu.Unlock()
		runs[id]++
		return len(runs)
	}
	done := make(chan struct{})
	var once sync.Once
	note := func(id int64) {
		if ran(id) == all {
			once.Do(func() { close(done) })
		}
	}
	_, stop := start(t, b.pool, worker.Config{DeleteCompleted: true}, worker.Handlers{
		"plain": func(ctx context.Context, task *worker.Task) error { note(task.ID); return nil },
		"fails": func(ctx context.Context, task *worker.Task) error {
			note(task.ID)
			return worker.Permanent(errors.New("no"))
		},
		"outputs": func(ctx context.Context, task *worker.Task) error {
			note(task.ID)
			return worker.SetOutput(ctx, map[string]int{"answer": 42})
		},
	})
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%d of %d tasks ran", len(runs), all)
	}
	waitFor(t, 2*time.Second, "no task pending, waiting or running", func() bool {
		return b.count(t, "status IN ('pending', 'waiting', 'running')") == 0
	})
	stop()

	for id, n := range runs {
		if n != 1 {
			t.Errorf("task %d ran %d times", id, n)
		}
	}
	for _, id := range gone {
		if task, err := b.client.Get(ctx, id); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("task %d: %+v, %v; want it deleted", id, task, err)
		}
	}
	for _, id := range kept {
		task, err := b.client.Get(ctx, id)
		if err != nil || task.Status != queue.StatusCompleted {
			t.Fatalf("task %d: %+v, %v; want it kept as completed", id, task, err)
		}
	}
	if task, err := b.client.Get(ctx, failing); err != nil || task.Status != queue.StatusFailed {
		t.Fatalf("failing task: %+v, %v", task, err)
	}
	if task, _ := b.client.Get(ctx, withOutput); string(task.Output) != `{"answer": 42}` {
		t.Fatalf("output %s", task.Output)
	}
	if info, err := b.client.GetBatch(ctx, batch.ID); err != nil || !info.Finished() || info.Completed != 2 {
		t.Fatalf("batch: %+v, %v", info, err)
	}
	if n := b.count(t, "true"); n != len(kept)+1 {
		t.Fatalf("%d tasks left, want %d", n, len(kept)+1)
	}
	if res, err := b.client.Enqueue(ctx, "plain", map[string]any{}, window...); err != nil || !res.Duplicate || res.ID != windowed {
		t.Fatalf("windowed key again: %+v, %v; want the kept task %d as a duplicate", res, err, windowed)
	}
	if res, err := b.client.Enqueue(ctx, "plain", map[string]any{}, queue.WithUniqueKey("u")); err != nil || res.Duplicate || res.ID == unique {
		t.Fatalf("plain unique key again: %+v, %v; want a new task", res, err)
	}
}

// The deleting write is fenced as the update is: a task that another
// worker, another attempt or another claim of the same attempt holds is
// neither deleted nor changed.
func TestDeleteCompletedFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	claimed := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	var ids []int64
	for _, row := range []string{
		`INSERT INTO skiplock_tasks (name, status, attempt, worker_id, started_at) VALUES ('job', 'running', 1, 'other', $1) RETURNING id`,
		`INSERT INTO skiplock_tasks (name, status, attempt, worker_id, started_at) VALUES ('job', 'running', 2, 'w', $1) RETURNING id`,
		`INSERT INTO skiplock_tasks (name, status, attempt) VALUES ('job', 'pending', 1) RETURNING id`,
		// Claimed again by this worker with the same attempt, after the
		// claim the write is for was lost.
		`INSERT INTO skiplock_tasks (name, status, attempt, worker_id, started_at) VALUES ('job', 'running', 1, 'w', $1::timestamptz + interval '1 second') RETURNING id`,
		`INSERT INTO skiplock_tasks (name, status, attempt, worker_id, started_at) VALUES ('job', 'running', 1, 'w', $1) RETURNING id`,
	} {
		var id int64
		args := []any{claimed}
		if !strings.Contains(row, "$1") {
			args = nil
		}
		if err := b.pool.QueryRow(ctx, row, args...).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	us := claimed.UnixMicro()
	at := []int64{us, us, us, us, us}
	wrote, err := db.New().TaskCompleteManyDeleting(ctx, b.pool, db.TaskCompleteManyDeletingParams{
		WorkerID: "w", Ids: ids, Attempts: []int32{1, 1, 1, 1, 1}, ClaimedUs: at})
	if err != nil {
		t.Fatal(err)
	}
	if len(wrote) != 1 || wrote[0] != ids[4] {
		t.Fatalf("wrote %v, want only %d", wrote, ids[4])
	}
	if n := b.count(t, "id = ANY($1) AND status IN ('running', 'pending')", ids[:4]); n != 4 {
		t.Fatalf("%d of the 4 fenced tasks are as they were", n)
	}
	if n := b.count(t, "id = $1", ids[4]); n != 0 {
		t.Fatalf("the worker's own task was not deleted")
	}
}
