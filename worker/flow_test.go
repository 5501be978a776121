package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// startThree runs three workers on separate pools, as three processes would.
func (b *bundle) startThree(t *testing.T, cfg worker.Config, handlers worker.Handlers) []*worker.Worker {
	t.Helper()
	var ws []*worker.Worker
	for range 3 {
		w, _ := start(t, pgtest.NewPool(t, b.schema), cfg, handlers)
		ws = append(ws, w)
	}
	return ws
}

// startThreeCounted is startThree with each worker's claims counted.
func (b *bundle) startThreeCounted(t *testing.T, cfg worker.Config, handlers worker.Handlers) []*claims {
	t.Helper()
	var cs []*claims
	for range 3 {
		c := &claims{}
		cfg := cfg
		cfg.Observer = c
		start(t, pgtest.NewPool(t, b.schema), cfg, handlers)
		cs = append(cs, c)
	}
	return cs
}

func TestUniqueKeysUnderConcurrentEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clients := []*queue.Client{
		queue.New(pgtest.NewPool(t, b.schema)), queue.New(pgtest.NewPool(t, b.schema)), queue.New(pgtest.NewPool(t, b.schema)),
	}
	for _, tc := range []struct {
		name string
		opts []queue.Option
	}{
		{"key", []queue.Option{queue.WithUniqueKey("report:2026-11")}},
		{"derived", []queue.Option{queue.WithUnique()}},
		{"window", []queue.Option{queue.WithUniqueKey("digest"), queue.WithUniqueWindow(time.Hour)}},
	} {
		var wg sync.WaitGroup
		var inserted, duplicates atomic.Int32
		ids := make(chan int64, 60)
		for i := range 60 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Every other producer asks for the error too.
				opts := tc.opts
				if i%2 == 1 {
					opts = append(slices.Clip(opts), queue.WithDuplicateError())
				}
				res, err := clients[i%3].Enqueue(context.Background(), "unique."+tc.name, map[string]int{"n": 1}, opts...)
				var dup *queue.DuplicateError
				switch {
				case err == nil && !res.Duplicate:
					inserted.Add(1)
				case err == nil && i%2 == 0:
					duplicates.Add(1)
				case res.Duplicate && errors.As(err, &dup) && errors.Is(err, queue.ErrDuplicate):
					duplicates.Add(1)
					if dup.ExistingID != res.ID {
						t.Errorf("duplicate reports %d, returns %d", dup.ExistingID, res.ID)
					}
				default:
					t.Errorf("Enqueue: %+v, %v", res, err)
				}
				ids <- res.ID
			}()
		}
		wg.Wait()
		close(ids)
		if inserted.Load() != 1 || duplicates.Load() != 59 {
			t.Fatalf("%s: %d inserted, %d duplicates; want 1 and 59", tc.name, inserted.Load(), duplicates.Load())
		}
		var first int64
		for id := range ids {
			if first == 0 {
				first = id
			}
			if id != first || id == 0 {
				t.Fatalf("%s: producers were told of different tasks: %d and %d", tc.name, first, id)
			}
		}
		if n := b.count(t, "name = $1", "unique."+tc.name); n != 1 {
			t.Fatalf("%s: %d rows", tc.name, n)
		}
	}

	// Once the task has finished, its key is free again; a windowed key is
	// not, for the rest of its window.
	b.pool.Exec(context.Background(), "UPDATE skiplock_tasks SET status = 'completed', finished_at = now()")
	if _, err := b.client.Enqueue(context.Background(), "unique.key", nil, queue.WithUniqueKey("report:2026-11")); err != nil {
		t.Fatalf("key of a finished task: %v", err)
	}
	res, err := b.client.Enqueue(context.Background(), "unique.window", nil, queue.WithUniqueKey("digest"), queue.WithUniqueWindow(time.Hour))
	if err != nil || !res.Duplicate {
		t.Fatalf("windowed key of a finished task: %+v, %v; want a duplicate", res, err)
	}

	// In a batch, the new ones go in and the duplicates are reported.
	ids, err := b.client.EnqueueMany(context.Background(), []queue.NewTask{
		{Name: "batch", Options: []queue.Option{queue.WithUniqueKey("b1")}},
		{Name: "batch", Options: []queue.Option{queue.WithUniqueKey("b1")}},
		{Name: "batch"},
		{Name: "batch", Options: []queue.Option{queue.WithUniqueKey("report:2026-11")}},
	})
	if err != nil || len(ids) != 4 || ids[1].ID != ids[0].ID || ids[3].ID == 0 || ids[2].ID == ids[0].ID ||
		ids[0].Duplicate || !ids[1].Duplicate || ids[2].Duplicate || !ids[3].Duplicate {
		t.Fatalf("batch: %+v, err %v", ids, err)
	}
	if n := b.count(t, "name = 'batch'"); n != 2 {
		t.Fatalf("batch inserted %d, want 2", n)
	}
}

func TestExclusiveKeyNeverRunsTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const keys, perKey = 4, 15
	var tasks []queue.NewTask
	for i := range keys * perKey {
		tasks = append(tasks, queue.NewTask{Name: "sync", Payload: i % keys,
			Options: []queue.Option{queue.WithExclusiveKey(fmt.Sprintf("account:%d", i%keys))}})
	}
	if _, err := b.client.EnqueueMany(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runningByKey := map[int]int{}
	maxByKey, maxTotal, total := 0, 0, 0
	b.startThree(t, worker.Config{Concurrency: 8}, worker.Handlers{"sync": func(ctx context.Context, task *worker.Task) error {
		var key int
		if err := task.Decode(&key); err != nil {
			return err
		}
		mu.Lock()
		runningByKey[key]++
		total++
		maxByKey = max(maxByKey, runningByKey[key])
		maxTotal = max(maxTotal, total)
		mu.Unlock()
		time.Sleep(15 * time.Millisecond) // the work
		mu.Lock()
		runningByKey[key]--
		total--
		mu.Unlock()
		return nil
	}})
	waitFor(t, 60*time.Second, "all done", func() bool { return b.count(t, "status = 'completed'") == keys*perKey })
	mu.Lock()
	defer mu.Unlock()
	if maxByKey != 1 {
		t.Fatalf("%d tasks of one exclusive key ran at once", maxByKey)
	}
	if maxTotal < 2 {
		t.Fatalf("different keys never ran in parallel (max %d at once)", maxTotal)
	}
	t.Logf("at most %d tasks ran at once, never two of one key", maxTotal)
}

func TestRateLimitNeverExceeded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// An hour-long window makes the count exact, unless the test straddles
	// a boundary of it (on the database clock, as the limit reads it): then
	// each of the two windows allows 5.
	window := func() time.Time {
		var w time.Time
		if err := b.pool.QueryRow(context.Background(),
			"SELECT to_timestamp(floor(extract(epoch FROM clock_timestamp()) / 3600) * 3600)").Scan(&w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	first := window()
	for i := range 20 {
		b.enqueue(t, "api.call", i)
		b.enqueue(t, "free", i)
	}
	var calls atomic.Int32
	polls := b.startThreeCounted(t, worker.Config{RateLimits: []worker.RateLimit{{Name: "api.call", Limit: 5, Per: time.Hour}}},
		worker.Handlers{
			"api.call": func(context.Context, *worker.Task) error { calls.Add(1); return nil },
			"free":     func(context.Context, *worker.Task) error { return nil },
		})
	waitFor(t, 10*time.Second, "unlimited tasks done", func() bool { return b.count(t, "name = 'free' AND status = 'completed'") == 20 })
	waitClaims(t, 10, polls...) // ten claims by each of the three workers
	c := int(calls.Load())
	pending := b.count(t, "name = 'api.call' AND status = 'pending' AND attempt = 0")
	if last := window(); !last.Equal(first) {
		t.Logf("the test straddled the window boundary at %s: %d calls in two windows", last, c)
		if c < 5 || c > 10 || pending != 20-c {
			t.Fatalf("%d calls in two windows of limit 5, %d tasks pending; want 5 to 10 calls and the rest pending", c, pending)
		}
		return
	}
	if c != 5 {
		t.Fatalf("%d calls in the window, limit 5", c)
	}
	if pending != 15 {
		t.Fatalf("%d tasks over the limit wait pending, want 15", pending)
	}
}

func TestRateLimitNextWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 6 {
		b.enqueue(t, "job", i, queue.WithQueue("limited"))
	}
	began := time.Now()
	b.startThree(t, worker.Config{Queues: []string{"limited"}, RateLimits: []worker.RateLimit{{Queue: "limited", Limit: 2, Per: time.Second}}},
		worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }})
	waitFor(t, 15*time.Second, "all done", func() bool { return b.count(t, "status = 'completed'") == 6 })
	// 2 per window: 6 tasks need three fixed windows, so at least the whole
	// middle one passes.
	if d := time.Since(began); d < time.Second {
		t.Fatalf("6 tasks at 2 per second finished in %s", d)
	}
	if n := b.count(t, "attempt <> 1"); n != 0 {
		t.Fatalf("%d tasks were retried or failed by the limit", n)
	}
}

func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.client.PauseQueue(context.Background(), "default"); err != nil {
		t.Fatal(err)
	}
	polls := b.startThreeCounted(t, worker.Config{}, worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }})
	for i := range 10 {
		b.enqueue(t, "job", i)
	}
	other := b.enqueue(t, "job", nil, queue.WithQueue("other"))
	waitClaims(t, 10, polls...) // ten claims of the paused queue by each worker
	if n := b.count(t, "status = 'pending' AND queue = 'default'"); n != 10 {
		t.Fatalf("paused queue: %d of 10 pending", n)
	}
	paused, err := ops.PausedQueues(context.Background(), b.client)
	if err != nil || len(paused) != 1 || paused[0].Name != "default" {
		t.Fatalf("PausedQueues = %v, %v", paused, err)
	}
	if err := b.client.ResumeQueue(context.Background(), "default"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "resumed queue drained", func() bool { return b.count(t, "status = 'completed'") == 10 })
	if s := b.get(t, other).Status; s != queue.StatusPending {
		t.Fatalf("task of a queue no worker serves is %s", s)
	}
}

func TestCancelRunningTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	causes := make(chan error, 1)
	b.startThree(t, worker.Config{PollInterval: time.Hour, HealthInterval: time.Hour}, worker.Handlers{
		"long": func(ctx context.Context, task *worker.Task) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		},
	})
	id := b.enqueue(t, "long", nil)
	waitFor(t, 10*time.Second, "running", func() bool { return b.get(t, id).Status == queue.StatusRunning })
	requested := time.Now()
	res, err := b.client.Cancel(context.Background(), queue.CancelRequest{
		Filter: queue.Filter{IDs: []int64{id, 987654}, Statuses: []queue.Status{queue.StatusRunning}},
	})
	if err != nil || len(res.Requested) != 1 || res.Requested[0] != id || res.Changed != 0 {
		t.Fatalf("Cancel of a running task = %+v, %v", res, err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, worker.ErrCancelled) {
			t.Fatalf("cause = %v", cause)
		}
		// NOTIFY, not the (hour-long) poll, delivered it.
		t.Logf("handler cancelled %s after the request", time.Since(requested))
	case <-time.After(pgtest.Patient(5 * time.Second)):
		t.Fatal("handler not cancelled")
	}
	waitFor(t, 5*time.Second, "cancelled", func() bool { return b.get(t, id).Status == queue.StatusCancelled })
	if task := b.get(t, id); task.FinishedAt == nil || task.Errors[0].Outcome != "cancelled" {
		t.Fatalf("task = %+v", task)
	}
}

func TestCancelRequestFallbackPoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cancelled := make(chan struct{})
	start(t, b.pool, worker.Config{}, worker.Handlers{"long": func(ctx context.Context, task *worker.Task) error {
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	}})
	id := b.enqueue(t, "long", nil)
	waitFor(t, 10*time.Second, "running", func() bool { return b.get(t, id).Status == queue.StatusRunning })
	// A request whose NOTIFY never came: only the row says so.
	if _, err := b.pool.Exec(context.Background(), "UPDATE skiplock_tasks SET cancel_requested_at = now() WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(pgtest.Patient(5 * time.Second)):
		t.Fatal("request without NOTIFY never reached the handler")
	}
}

func TestSnooze(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, "later", nil, queue.WithMaxAttempts(1))
	var calls atomic.Int32
	start(t, b.pool, worker.Config{}, worker.Handlers{"later": func(ctx context.Context, task *worker.Task) error {
		if calls.Add(1) < 3 {
			return worker.Snooze(50 * time.Millisecond)
		}
		return nil
	}})
	waitFor(t, 10*time.Second, "completion", func() bool { return b.get(t, id).Status == queue.StatusCompleted })
	// Snoozes spend no attempt and record no failure: with max attempts 1
	// the third run still happened.
	if task := b.get(t, id); task.Attempt != 1 || len(task.Errors) != 0 || calls.Load() != 3 {
		t.Fatalf("task = %+v after %d calls", task, calls.Load())
	}
}

type countingObserver struct {
	worker.NopObserver
	claimed, finished atomic.Int32
	outcomes          sync.Map
}

func (o *countingObserver) Claimed(_ string, _, got int) { o.claimed.Add(int32(got)) }
func (o *countingObserver) Finished(t *worker.Task, out worker.Outcome, next queue.Status, _ time.Duration) {
	o.finished.Add(1)
	o.outcomes.Store(t.ID, string(out)+"->"+string(next))
}

func TestMiddlewareAndObserver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var order []string
	var mu sync.Mutex
	mw := func(tag string) worker.Middleware {
		return func(next worker.Handler) worker.Handler {
			return func(ctx context.Context, task *worker.Task) error {
				mu.Lock()
				order = append(order, tag)
				mu.Unlock()
				return next(ctx, task)
			}
		}
	}
	obs := &countingObserver{}
	ok := b.enqueue(t, "ok", nil)
	bad := b.enqueue(t, "bad", nil, queue.WithMaxAttempts(1))
	start(t, b.pool, worker.Config{Middleware: []worker.Middleware{mw("outer"), mw("inner")}, Observer: obs}, worker.Handlers{
		"ok":  func(context.Context, *worker.Task) error { return nil },
		"bad": func(context.Context, *worker.Task) error { return errors.New("no") },
	})
	waitFor(t, 10*time.Second, "both finished", func() bool { return b.count(t, "status IN ('completed', 'failed')") == 2 })
	if obs.claimed.Load() != 2 || obs.finished.Load() != 2 {
		t.Fatalf("observer saw %d claimed, %d finished", obs.claimed.Load(), obs.finished.Load())
	}
	if o, _ := obs.outcomes.Load(ok); o != "->completed" {
		t.Fatalf("ok: %v", o)
	}
	if o, _ := obs.outcomes.Load(bad); o != "error->failed" {
		t.Fatalf("bad: %v", o)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 4 || order[0] != "outer" || order[1] != "inner" {
		t.Fatalf("middleware order %v", order)
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(context.Background(), `
		INSERT INTO skiplock_tasks (name, status, attempt, finished_at)
		SELECT 'old', s, 1, now() - interval '2 hours'
		FROM unnest(ARRAY['completed', 'failed', 'cancelled']) AS s, generate_series(1, 300)`)
	if err != nil {
		t.Fatal(err)
	}
	recent := b.enqueue(t, "recent", nil)
	start(t, b.pool, worker.Config{RetainCompleted: time.Hour, RetainFailed: -1, RetainCancelled: time.Second},
		worker.Handlers{"recent": func(context.Context, *worker.Task) error { return nil }})
	waitFor(t, 10*time.Second, "old completed and cancelled tasks deleted", func() bool {
		return b.count(t, "name = 'old' AND status IN ('completed', 'cancelled')") == 0
	})
	if n := b.count(t, "name = 'old' AND status = 'failed'"); n != 300 {
		t.Fatalf("%d failed tasks kept, want 300 (kept forever)", n)
	}
	// The retirer may pass before the recent task has run: wait for its
	// completion, which retention (an hour) must then leave alone.
	waitFor(t, 10*time.Second, "the recent task completed and kept", func() bool {
		return b.count(t, fmt.Sprintf("id = %d AND status = 'completed'", recent)) == 1
	})
}

// TestQueueConcurrencyCap: a queue with slots of its own never runs more
// tasks at once than its cap, and the worker's other queues still run.
func TestQueueConcurrencyCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 12 {
		b.enqueue(t, "work", i, queue.WithQueue("capped"))
		b.enqueue(t, "work", i)
	}
	var mu sync.Mutex
	running := map[string]int{}
	most := map[string]int{}
	start(t, b.pool, worker.Config{Concurrency: 8, Queues: []string{"default", "capped"}, QueueConcurrency: map[string]int{"capped": 2}},
		worker.Handlers{"work": func(ctx context.Context, task *worker.Task) error {
			mu.Lock()
			running[task.Queue]++
			most[task.Queue] = max(most[task.Queue], running[task.Queue])
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // work
			mu.Lock()
			running[task.Queue]--
			mu.Unlock()
			return nil
		}})
	waitFor(t, 5*time.Second, "all done", func() bool { return b.count(t, "status = 'completed'") == 24 })
	mu.Lock()
	defer mu.Unlock()
	if most["capped"] > 2 {
		t.Fatalf("%d tasks of a queue capped at 2 ran at once", most["capped"])
	}
	t.Logf("at most %d capped and %d uncapped tasks ran at once", most["capped"], most["default"])
}
