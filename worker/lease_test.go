package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// bouncerPool opens a pool through a PgBouncer in transaction mode in front
// of the test's schema.
func (b *bundle) bouncerPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return pgtest.PoolFromConfig(t, cfg)
}

func TestAdvisoryModeBehindTransactionPoolerFailsFast(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.bouncerPool(t, pgtest.PgBouncer(t, pgtest.Server(t).URL, b.schema))
	began := time.Now()
	err := worker.New(pool, testConfig(worker.Config{})).Run(context.Background(), worker.Handlers{"x": func(context.Context, *worker.Task) error { return nil }})
	if !errors.Is(err, worker.ErrTransactionPooling) {
		t.Fatalf("err = %v, want ErrTransactionPooling", err)
	}
	t.Logf("refused in %s: %v", time.Since(began), err)
}

func TestLeaseModeNeedsNoStatementCache(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.bouncerPool(t, pgtest.WithStatementCache(pgtest.PgBouncer(t, pgtest.Server(t).URL, b.schema)))
	err := worker.New(pool, testConfig(worker.Config{Mode: worker.ModeLease})).Run(context.Background(), worker.Handlers{"x": func(context.Context, *worker.Task) error { return nil }})
	if !errors.Is(err, worker.ErrStatementCache) {
		t.Fatalf("err = %v, want ErrStatementCache", err)
	}
}

// TestLeaseModeThroughPgBouncer: the core promise, in lease mode through a
// transaction pooler: two workers, every task completed exactly once, no
// advisory lock taken.
func TestLeaseModeThroughPgBouncer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bouncer := pgtest.PgBouncer(t, pgtest.Server(t).URL, b.schema)
	const total = 2000
	tasks := make([]queue.NewTask, total)
	for i := range tasks {
		tasks[i] = queue.NewTask{Name: "count", Payload: i}
	}
	// Producers work through the pooler too.
	if _, err := queue.New(b.bouncerPool(t, bouncer)).EnqueueMany(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[int64]int{}
	var sawLease atomic.Bool
	handler := func(ctx context.Context, task *worker.Task) error {
		mu.Lock()
		runs[task.ID]++
		mu.Unlock()
		if task.ID%500 == 0 && b.count(t, "id = $1 AND locked_until > now()", task.ID) == 1 {
			sawLease.Store(true)
		}
		return nil
	}
	cfg := worker.Config{Mode: worker.ModeLease, Concurrency: 8, LeaseDuration: 3 * time.Second}
	start(t, b.bouncerPool(t, bouncer), cfg, worker.Handlers{"count": handler})
	start(t, b.bouncerPool(t, bouncer), cfg, worker.Handlers{"count": handler})
	waitFor(t, 2*time.Minute, "all completed", func() bool { return b.count(t, "status = 'completed'") == total })
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Fatalf("task %d ran %d times", id, n)
		}
	}
	if len(runs) != total || !sawLease.Load() {
		t.Fatalf("%d tasks ran; a running task's lease seen: %v", len(runs), sawLease.Load())
	}
	if n := b.taskLocks(t); n != 0 {
		t.Fatalf("lease mode took %d advisory locks", n)
	}
}

// TestLeaseExpiryRescueAndFencing: a task whose lease expires is rescued
// and run elsewhere; its first worker's handler is cancelled when its
// heartbeat finds the lease gone, and its late completion is discarded.
func TestLeaseExpiryRescueAndFencing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bouncer := pgtest.PgBouncer(t, pgtest.Server(t).URL, b.schema)
	cfg := worker.Config{Mode: worker.ModeLease, LeaseDuration: time.Second}
	cancelled := make(chan error, 1)
	// A's handler returns success only once the task has run elsewhere.
	ranElsewhere := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(ranElsewhere) }) }
	defer release()
	// One slot, which A's hanging handler keeps: A cannot claim the task
	// again, so B runs it.
	aCfg := cfg
	aCfg.Concurrency = 1
	a, stopA := start(t, b.bouncerPool(t, bouncer), aCfg, worker.Handlers{"job": func(ctx context.Context, task *worker.Task) error {
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		<-ranElsewhere
		return nil // too late: fenced
	}})
	id := b.enqueue(t, "job", nil)
	waitFor(t, 10*time.Second, "A running it", func() bool { return b.get(t, id).WorkerID == a.ID() })
	// A freezes in the eyes of the database: its lease runs out, and stays
	// out until the rescuer sees it, as if A's heartbeats no longer landed.
	// (Expired once, A's next heartbeat could renew it before a rescuer
	// that is slow to start on a busy machine looks. A real death is the
	// chaos test's.)
	expire := func() {
		_, err := b.pool.Exec(context.Background(), `UPDATE skiplock_tasks SET locked_until = now() - interval '1s'
			WHERE id = $1 AND worker_id = $2 AND status = 'running'`, id, a.ID())
		if err != nil {
			t.Fatal(err)
		}
	}
	expire()
	bw, _ := start(t, b.bouncerPool(t, bouncer), cfg, worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }})
	waitFor(t, 5*time.Second, "rescued and completed by B", func() bool {
		expire()
		task := b.get(t, id)
		return task.Status == queue.StatusCompleted && task.WorkerID == bw.ID()
	})
	select {
	case <-cancelled:
	case <-time.After(pgtest.Patient(5 * time.Second)):
		t.Fatal("A's handler was not cancelled when its lease was lost")
	}
	// A's fenced write: stopping A waits for its handler to return and for
	// its completer to write the outcome, which the fence must discard.
	release()
	stopA()
	task := b.get(t, id)
	// The rescue gave A's attempt back: B ran attempt 1 again.
	if task.WorkerID != bw.ID() || task.Attempt != 1 || len(task.Errors) != 1 || task.Errors[0].Outcome != "rescued" {
		t.Fatalf("task = %+v", task)
	}
}

// TestLeaseModeFlow: retries, periodic ticks and cancellation by poll also
// work through the pooler, without LISTEN.
func TestLeaseModeFlow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bouncer := pgtest.PgBouncer(t, pgtest.Server(t).URL, b.schema)
	var calls atomic.Int32
	cfg := worker.Config{Mode: worker.ModeLease, Periodic: []worker.PeriodicTask{{Every: time.Second, Task: "tick"}}}
	start(t, b.bouncerPool(t, bouncer), cfg, worker.Handlers{
		"flaky": func(context.Context, *worker.Task) error {
			if calls.Add(1) == 1 {
				return errors.New("once")
			}
			return nil
		},
		"tick": func(context.Context, *worker.Task) error { return nil },
		"long": func(ctx context.Context, _ *worker.Task) error { <-ctx.Done(); return ctx.Err() },
	})
	flaky := b.enqueue(t, "flaky", nil)
	long := b.enqueue(t, "long", nil)
	waitFor(t, 10*time.Second, "retry then success", func() bool { return b.get(t, flaky).Status == queue.StatusCompleted })
	waitFor(t, 10*time.Second, "long running", func() bool { return b.get(t, long).Status == queue.StatusRunning })
	if _, err := b.client.Cancel(context.Background(), queue.CancelRequest{Filter: queue.Filter{IDs: []int64{long}, Statuses: []queue.Status{queue.StatusRunning}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "cancelled by poll", func() bool { return b.get(t, long).Status == queue.StatusCancelled })
	waitFor(t, 5*time.Second, "periodic ticks", func() bool { return b.count(t, "name = 'tick' AND status = 'completed'") >= 2 })
}
