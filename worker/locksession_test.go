package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// The lock session's jsonb codec copies what PostgreSQL sends into a
// json.RawMessage, and still decodes into anything else.
func TestUnmarshalRaw(t *testing.T) {
	src := []byte(`{"a": [1, 2]}`)
	var raw json.RawMessage
	if err := unmarshalRaw(src, &raw); err != nil || string(raw) != `{"a": [1, 2]}` {
		t.Fatalf("raw = %s, %v", raw, err)
	}
	src[2] = 'b'
	if string(raw) != `{"a": [1, 2]}` {
		t.Fatalf("raw shares the source's memory: %s", raw)
	}
	var m map[string][]int
	if err := unmarshalRaw([]byte(`{"a": [1, 2]}`), &m); err != nil || len(m["a"]) != 2 {
		t.Fatalf("m = %v, %v", m, err)
	}
}

// A held claim whose unlocks release the last limit block the session
// holds runs as a queue claim: with no block it could only take nothing,
// and the worker would stop trying held claims for a while (under a limit
// far above what runs, the last task of a block often ends just before
// the next claim, which carries its unlock).
func TestHeldClaimWithoutBlock(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := b.client.Enqueue(ctx, "job", nil); err != nil {
			t.Fatal(err)
		}
	}
	ls, p := openClaimSession(t, b)
	p.Max, p.CheckFull = 1, true
	rows, gen, ran, err := ls.claim(p, howQueue)
	if err != nil || len(rows) != 1 || len(rows[0].LimitLocks) != 1 || ran != howQueue {
		t.Fatalf("queue claim: %d rows (%+v), ran %d, %v; want one task with one block", len(rows), rows, ran, err)
	}
	// The task ends: its unlock, the block's with it, waits for the next
	// claim (or goes on its own if that is late: the block is gone either
	// way).
	ls.release([]int64{rows[0].ID}, rows[0].LimitLocks, nil, gen, false)
	p.CheckFull = false
	rows, _, ran, err = ls.claim(p, howHeld)
	if err != nil || len(rows) != 1 || ran != howQueue {
		t.Fatalf("held claim after the block went: %d rows, ran %d, %v; want the other task, by a queue claim (%d)", len(rows), ran, err, howQueue)
	}
	if len(rows[0].LimitLocks) != 1 {
		t.Fatalf("the task took no place: limit locks %v", rows[0].LimitLocks)
	}
}

// A task whose lock session is lost between its claim and its start is
// not run: the loss cancelled the running tasks it found, and this one
// was not running yet. It goes back to pending with the lock_lost outcome,
// as a running task of the lost session does.
func TestLaunchAfterLockLoss(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	ran := make(chan string, 4)
	handlers := Handlers{
		"ready": func(context.Context, *Task) error { ran <- "ready"; return nil },
		"late":  func(context.Context, *Task) error { ran <- "late"; return nil },
	}
	w := New(b.pool, Config{Logger: b.log})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx, handlers) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// The worker is up once it has run a task.
	if _, err := b.client.Enqueue(ctx, "ready", nil); err != nil {
		t.Fatal(err)
	}
	if got := waitFor(t, ran, "the first task"); got != "ready" {
		t.Fatalf("ran %s", got)
	}
	// A task of a queue the worker does not claim, claimed here on its
	// lock session.
	id, err := b.client.Enqueue(ctx, "late", nil, queue.WithQueue("elsewhere"))
	if err != nil {
		t.Fatal(err)
	}
	p := db.TaskClaimParams{WorkerID: w.cfg.WorkerID, Queue: "elsewhere", OnlyNames: []string{}, SkipNames: []string{},
		OnlyIds: []int64{}, Max: 1, ExclusiveSeed: b.schema.TableOID}
	rows, gen, _, err := w.guard.claim(p, howPlain, nil)
	if err != nil || len(rows) != 1 || rows[0].ID != id.ID {
		t.Fatalf("claimed %+v, %v", rows, err)
	}
	// The session dies; its next statement finds out and cancels what
	// runs.
	b.exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", w.cfg.sessionTuning().appName)
	deadline := time.Now().Add(pgtest.Patient(10 * time.Second))
	for !w.guard.lost(gen) {
		if time.Now().After(deadline) {
			t.Fatal("the lock session's loss was not noticed")
		}
		w.guard.claim(p, howPlain, nil)
		time.Sleep(10 * time.Millisecond)
	}
	if err := w.slots.all.Acquire(ctx, 1); err != nil { // the claim loop's part
		t.Fatal(err)
	}
	w.launch(rows[0], gen, nil, false, false, nil)
	pgtest.Eventually(t, 5*time.Second, "the outcome written", func() bool { return b.status(t, id.ID) != "running" })
	select {
	case got := <-ran:
		t.Fatalf("ran %s, whose lock was lost before it started", got)
	default:
	}
	if s := b.status(t, id.ID); s != "pending" {
		t.Fatalf("status %s, want pending", s)
	}
	task, err := b.client.Get(ctx, id.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(task.Errors) != 1 || task.Errors[0].Outcome != string(OutcomeLockLost) {
		t.Fatalf("history %+v, want one lock_lost attempt", task.Errors)
	}
}

// A held claim's rows are read by hand (TaskClaimHeldRows) as the plain
// claim's are: every column lands in its field, and limit_locks is the
// block the session holds.
func TestHeldClaimRows(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{}
	for i := range 3 {
		res, err := b.client.Enqueue(ctx, "job", map[string]int{"n": i}, queue.WithPriority(i),
			queue.WithTimeout(time.Duration(i+1)*time.Second), queue.WithMaxAttempts(5+i), queue.WithExclusiveKey(fmt.Sprint("k", i)))
		if err != nil {
			t.Fatal(err)
		}
		want[res.ID] = fmt.Sprintf(`{"n": %d}`, i)
	}
	ls, p := openClaimSession(t, b)
	p.Max, p.CheckFull = 1, true
	first, _, ran, err := ls.claim(p, howQueue)
	if err != nil || len(first) != 1 || len(first[0].LimitLocks) != 1 || ran != howQueue {
		t.Fatalf("queue claim: %d rows, ran %d, %v; want one task with one block", len(first), ran, err)
	}
	p.Max, p.CheckFull = 2, false
	rows, _, ran, err := ls.claim(p, howHeld)
	if err != nil || len(rows) != 2 || ran != howHeld {
		t.Fatalf("held claim: %d rows, ran %d, %v; want two, by the held claim (%d)", len(rows), ran, err, howHeld)
	}
	for _, r := range append(first, rows...) {
		var payload string
		if err := b.pool.QueryRow(ctx, `SELECT payload::text FROM skiplock_tasks WHERE id = $1`, r.ID).Scan(&payload); err != nil {
			t.Fatal(err)
		}
		n := int(r.Priority)
		if payload != want[r.ID] || string(r.Payload) != want[r.ID] || r.Queue != queue.DefaultQueue || r.Name != "job" ||
			string(r.Metadata) != "{}" || r.Attempt != 1 || r.MaxAttempts != int32(5+n) ||
			r.TimeoutMs == nil || *r.TimeoutMs != int64(n+1)*1000 || r.RunAt.IsZero() || r.CreatedAt.IsZero() ||
			r.StartedAt == nil || r.ExclusiveKey != fmt.Sprint("k", n) || !slices.Equal(r.LimitLocks, first[0].LimitLocks) {
			t.Errorf("row %+v (stored payload %s, want %s; block %v)", r, payload, want[r.ID], first[0].LimitLocks)
		}
	}
}
