package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is what a test works with: a migrated schema, a pool on it and a
// producer.
type bundle struct {
	schema string
	pool   *pgxpool.Pool
	client *queue.Client
}

func setup(t *testing.T) *bundle {
	t.Helper()
	schema := pgtest.Schema(t, true)
	pool := pgtest.NewPool(t, schema)
	return &bundle{schema: schema, pool: pool, client: queue.New(pool)}
}

// testConfig is a Config with timers short enough for tests.
func testConfig(cfg worker.Config) worker.Config {
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.RescueInterval == 0 {
		cfg.RescueInterval = 100 * time.Millisecond
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = 100 * time.Millisecond
	}
	if cfg.RetryBackoff == nil {
		cfg.RetryBackoff = func(int) time.Duration { return 0 }
	}
	if cfg.Logger == nil {
		level := slog.LevelError
		if os.Getenv("SKIPLOCK_TEST_LOG") != "" {
			level = slog.LevelDebug
		}
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	return cfg
}

// start runs a worker on pool until the test ends (or stop is called) and
// checks that Run returns nil.
func start(t *testing.T, pool *pgxpool.Pool, cfg worker.Config, handlers worker.Handlers) (w *worker.Worker, stop func()) {
	t.Helper()
	w = worker.New(pool, testConfig(cfg))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, handlers) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(pgtest.Patient(60 * time.Second)):
				t.Errorf("Run did not return within 60s of cancellation")
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

// waitFor is pgtest.Eventually: expect is how long cond takes to hold on
// an idle machine.
func waitFor(t *testing.T, expect time.Duration, what string, cond func() bool) {
	t.Helper()
	pgtest.Eventually(t, expect, what, cond)
}

// claims counts a worker's claim queries (as its Observer): the signal
// that its claim loop has gone round, for checks that something did not
// happen.
type claims struct {
	worker.NopObserver
	n atomic.Int64
}

func (c *claims) Claimed(string, int, int) { c.n.Add(1) }

// waitClaims waits until each worker has made n more claim queries than
// when it was called.
func waitClaims(t *testing.T, n int64, cs ...*claims) {
	t.Helper()
	from := make([]int64, len(cs))
	for i, c := range cs {
		from[i] = c.n.Load()
	}
	for i, c := range cs {
		waitFor(t, time.Duration(n)*100*time.Millisecond, fmt.Sprintf("%d more claims of worker %d", n, i), func() bool {
			return c.n.Load() >= from[i]+n
		})
	}
}

func (b *bundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock_tasks WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// taskLocks counts the task advisory locks held on the server for this
// schema's table.
func (b *bundle) taskLocks(t *testing.T) int {
	t.Helper()
	var n int
	err := b.pool.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 2
		  AND classid = 'skiplock_tasks'::regclass::oid`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bundle) enqueue(t *testing.T, name string, payload any, opts ...queue.Option) int64 {
	t.Helper()
	id, err := b.client.Enqueue(context.Background(), name, payload, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (b *bundle) get(t *testing.T, id int64) *queue.Task {
	t.Helper()
	task, err := b.client.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func TestTwoWorkersTenThousandTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const total = 10000
	tasks := make([]queue.NewTask, total)
	for i := range tasks {
		tasks[i] = queue.NewTask{Name: "count", Payload: map[string]int{"i": i}}
	}
	if _, err := b.client.EnqueueMany(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	runs := map[int64]int{}
	byWorker := map[string]int{}
	handler := func(name string) worker.Handler {
		return func(ctx context.Context, task *worker.Task) error {
			mu.Lock()
			runs[task.ID]++
			byWorker[name]++
			mu.Unlock()
			return nil
		}
	}
	// Two workers on separate pools, as two processes would be.
	_, stopA := start(t, pgtest.NewPool(t, b.schema), worker.Config{Concurrency: 8}, worker.Handlers{"count": handler("a")})
	_, stopB := start(t, pgtest.NewPool(t, b.schema), worker.Config{Concurrency: 8}, worker.Handlers{"count": handler("b")})

	waitFor(t, 2*time.Minute, "all tasks completed", func() bool { return b.count(t, "status = 'completed'") == total })
	stopA()
	stopB()

	mu.Lock()
	defer mu.Unlock()
	if len(runs) != total {
		t.Fatalf("%d distinct tasks ran, want %d", len(runs), total)
	}
	for id, n := range runs {
		if n != 1 {
			t.Fatalf("task %d ran %d times", id, n)
		}
	}
	if byWorker["a"] == 0 || byWorker["b"] == 0 {
		t.Fatalf("work not shared: %v", byWorker)
	}
	if n := b.count(t, "attempt <> 1 OR errors <> '[]' OR worker_id IS NULL OR finished_at IS NULL"); n != 0 {
		t.Fatalf("%d completed tasks have a wrong record", n)
	}
	if n := b.taskLocks(t); n != 0 {
		t.Fatalf("%d advisory locks left after both workers stopped", n)
	}
	t.Logf("worker a ran %d, worker b ran %d", byWorker["a"], byWorker["b"])
}

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
		_, err := worker.Decode[struct{ N int }](task)
		return err
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
		!strings.Contains(e.Error, "worker_test.go") {
		t.Fatalf("error entry lacks the panic and its stack: %+v", e)
	}
}

func TestUnknownTaskName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, "nobody.handles.this", nil)
	start(t, b.pool, worker.Config{}, worker.Handlers{"known": func(context.Context, *worker.Task) error { return nil }})
	waitFor(t, 10*time.Second, "failure", func() bool { return b.get(t, id).Status == queue.StatusFailed })
	task := b.get(t, id)
	if task.Attempt != 1 || len(task.Errors) != 1 || task.Errors[0].Outcome != "no_handler" ||
		!strings.Contains(task.Errors[0].Error, `no handler for task name "nobody.handles.this"`) ||
		!strings.Contains(task.Errors[0].Error, "known") {
		t.Fatalf("task = %+v", task)
	}
}

// TestAdvisoryLocks checks the claim's core promise: exactly one advisory
// lock per running task, at large claim batches too, and none once the
// tasks finish.
func TestAdvisoryLocks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tasks, concurrency, batch, history int
	}{
		{tasks: 50, concurrency: 20, batch: 20},
		// A long history of finished tasks is what tempts the planner to
		// evaluate a lock call in a WHERE clause on a scan of the whole
		// table: a claim written that way leaks thousands of locks here.
		{tasks: 3000, concurrency: 2500, batch: 1000, history: 100000},
	} {
		t.Run(fmt.Sprintf("batch%d", tc.batch), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if tc.history > 0 {
				_, err := b.pool.Exec(context.Background(), `
					INSERT INTO skiplock_tasks (name, status, attempt, finished_at)
					SELECT 'old', 'completed', 1, now() FROM generate_series(1, $1)`, tc.history)
				if err != nil {
					t.Fatal(err)
				}
			}
			tasks := make([]queue.NewTask, tc.tasks)
			for i := range tasks {
				tasks[i] = queue.NewTask{Name: "hold"}
			}
			if _, err := b.client.EnqueueMany(context.Background(), tasks); err != nil {
				t.Fatal(err)
			}
			// Statistics that know both the history and the backlog.
			if _, err := b.pool.Exec(context.Background(), "ANALYZE skiplock_tasks"); err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			_, stop := start(t, b.pool, worker.Config{Concurrency: tc.concurrency, ClaimBatch: tc.batch},
				worker.Handlers{"hold": func(ctx context.Context, task *worker.Task) error {
					select {
					case <-release:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}})
			waitFor(t, 30*time.Second, "tasks running", func() bool { return b.count(t, "status = 'running'") == tc.concurrency })
			// No claim is in flight to take extra locks later: every slot
			// holds a running task, the claim loop claims only into a free
			// slot, and a claim locks and marks running in one statement.
			if running, locks := b.count(t, "status = 'running'"), b.taskLocks(t); running != tc.concurrency || locks != running {
				t.Fatalf("%d running tasks hold %d advisory locks, want %d each", running, locks, tc.concurrency)
			}
			// The locks are those of exactly the running tasks.
			if n := b.count(t, `status = 'running' AND id % 4294967296 NOT IN (
				SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2
				  AND classid = 'skiplock_tasks'::regclass::oid)`); n != 0 {
				t.Fatalf("%d running tasks have no lock", n)
			}
			close(release)
			waitFor(t, 60*time.Second, "all completed", func() bool { return b.count(t, "status = 'completed'") == tc.tasks+tc.history })
			waitFor(t, 5*time.Second, "locks released", func() bool { return b.taskLocks(t) == 0 })
			stop()
		})
	}
}

func TestNotifyWakesIdleWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := make(chan time.Time, 1)
	// A poll interval far beyond the test's deadline: only NOTIFY can wake it.
	polls := &claims{}
	start(t, b.pool, worker.Config{PollInterval: time.Hour, Observer: polls}, worker.Handlers{"ping": func(context.Context, *worker.Task) error {
		done <- time.Now()
		return nil
	}})
	// Idle and listening: Run claims only once LISTEN holds, and its first
	// claim finds nothing.
	waitFor(t, time.Second, "the first claim", func() bool { return polls.n.Load() > 0 })
	enqueued := time.Now()
	b.enqueue(t, "ping", nil)
	select {
	case at := <-done:
		t.Logf("enqueue to handler start: %s", at.Sub(enqueued))
	case <-time.After(pgtest.Patient(10 * time.Second)):
		t.Fatal("idle worker not woken by NOTIFY")
	}
}

func TestDelayedTaskWaits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, "later", nil, queue.WithDelay(700*time.Millisecond))
	ran := make(chan time.Time, 1)
	start(t, b.pool, worker.Config{}, worker.Handlers{"later": func(context.Context, *worker.Task) error {
		ran <- time.Now()
		return nil
	}})
	task := b.get(t, id)
	select {
	case at := <-ran:
		if at.Before(task.RunAt) {
			t.Fatalf("ran at %s, before its run_at %s", at, task.RunAt)
		}
	case <-time.After(pgtest.Patient(10 * time.Second)):
		t.Fatal("delayed task never ran")
	}
}

func TestPriorityOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, p := range []int{5, -1, 3, 0} {
		b.enqueue(t, "ordered", i, queue.WithPriority(p))
	}
	var mu sync.Mutex
	var order []int
	start(t, b.pool, worker.Config{Concurrency: 1}, worker.Handlers{"ordered": func(ctx context.Context, task *worker.Task) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, task.Priority)
		return nil
	}})
	waitFor(t, 10*time.Second, "all ran", func() bool { return b.count(t, "status = 'completed'") == 4 })
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[-1 0 3 5]" {
		t.Fatalf("ran in priority order %v", order)
	}
}

// TestCursorLeavesNothingBehind: while claims start at the cursor (the head
// of the claim index is expensive), a task that sorts before the cursor (a
// higher priority) is still claimed, by the next claim from the head. The
// worker polls once an hour: the notification wakes it for a claim from the
// cursor, which cannot see the task, and the loop must wake itself for the
// head claim when it falls due.
func TestCursorLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	ran := map[int]int{}
	w, _ := start(t, b.pool, worker.Config{PollInterval: time.Hour}, worker.Handlers{"c": func(ctx context.Context, task *worker.Task) error {
		var p struct{ I int }
		if err := json.Unmarshal(task.Payload, &p); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		ran[p.I]++
		return nil
	}})
	b.enqueue(t, "c", map[string]int{"i": 1})
	waitFor(t, 10*time.Second, "the first task ran", func() bool { return b.count(t, "status = 'completed'") == 1 })
	worker.ForceCursor(w, queue.DefaultQueue)
	if _, err := b.client.EnqueueMany(context.Background(), []queue.NewTask{
		{Name: "c", Payload: map[string]int{"i": 2}, Options: []queue.Option{queue.WithPriority(-5)}},
		{Name: "c", Payload: map[string]int{"i": 3}},
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "all ran", func() bool { return b.count(t, "status = 'completed'") == 3 })
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(ran) != "map[1:1 2:1 3:1]" {
		t.Fatalf("runs per task: %v", ran)
	}
}

func TestQueuesAreSeparate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := b.enqueue(t, "job", nil, queue.WithQueue("other"))
	mine := b.enqueue(t, "job", nil, queue.WithQueue("mine"))
	polls := &claims{}
	start(t, b.pool, worker.Config{Queues: []string{"mine"}, Observer: polls}, worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }})
	waitFor(t, 10*time.Second, "own queue's task", func() bool { return b.get(t, mine).Status == queue.StatusCompleted })
	waitClaims(t, 4, polls)
	if s := b.get(t, other).Status; s != queue.StatusPending {
		t.Fatalf("task of another queue is %s", s)
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	ok := worker.Handlers{"x": func(context.Context, *worker.Task) error { return nil }}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	t.Run("not migrated", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t, pgtest.Schema(t, false))
		err := worker.New(pool, worker.Config{Logger: quiet}).Run(context.Background(), ok)
		if !errors.Is(err, worker.ErrNotMigrated) || !strings.Contains(err.Error(), "skiplock migrate up") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no handlers", func(t *testing.T) {
		t.Parallel()
		err := worker.New(pgtest.Pool(t), worker.Config{Logger: quiet}).Run(context.Background(), nil)
		if !errors.Is(err, worker.ErrNoHandlers) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		t.Parallel()
		err := worker.New(pgtest.Pool(t), worker.Config{Concurrency: -1, Queues: []string{"a", "a"}}).Run(context.Background(), ok)
		if err == nil || !strings.Contains(err.Error(), "Concurrency must be positive") || !strings.Contains(err.Error(), `"a" listed twice`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("unreachable database", func(t *testing.T) {
		// Not a configuration error: Run waits for the database until its
		// context ends (TestStartWaitsForDatabase), then returns nil.
		t.Parallel()
		pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := worker.New(pool, worker.Config{Logger: quiet}).Run(ctx, ok); err != nil {
			t.Fatalf("err = %v, want nil once the context ends", err)
		}
	})
}

// TestOutcomeWritePlan: on a table that was never analyzed, with the
// entries of thousands of finished tasks still in the running index (a
// fresh backlog worked without vacuum), the outcome write must not read the
// partial running index and compare every running row with every row of
// the batch (a nested loop with a join filter): it probes the primary key
// per row, or hashes the batch on a table small enough to scan.
func TestOutcomeWritePlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO skiplock_tasks (name) SELECT 'p' FROM generate_series(1, 3000)`,
		`UPDATE skiplock_tasks SET status = 'running', attempt = 1, worker_id = 'w' WHERE id IN (SELECT id FROM skiplock_tasks ORDER BY id LIMIT 2500)`,
		`UPDATE skiplock_tasks SET status = 'completed', finished_at = now() WHERE status = 'running'`,
		`UPDATE skiplock_tasks SET status = 'running', attempt = 1, worker_id = 'w' WHERE id IN (SELECT id FROM skiplock_tasks WHERE status = 'pending' ORDER BY id LIMIT 250)`,
	} {
		if _, err := b.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var ids []int64
	if err := b.pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM skiplock_tasks WHERE status = 'running'`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	n := len(ids)
	attempts, statuses, delays, refunds := make([]int32, n), make([]string, n), make([]int64, n), make([]int32, n)
	errs, outputs := make([]json.RawMessage, n), make([]json.RawMessage, n)
	for i := range n {
		attempts[i], statuses[i], delays[i], errs[i], outputs[i] = 1, "completed", -1, json.RawMessage("null"), json.RawMessage("null")
	}
	rows, err := b.pool.Query(ctx, "EXPLAIN "+db.TaskFinishManySQL, pgx.QueryExecModeExec, "w", ids, attempts, statuses, delays, refunds, errs, outputs)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if strings.Contains(plan, "skiplock_tasks_running_idx") || strings.Contains(plan, "Join Filter") ||
		!(strings.Contains(plan, "Index Scan using skiplock_tasks_pkey") || strings.Contains(plan, "Hash Join")) {
		t.Fatalf("the outcome write of %d rows is planned as a scan of running rows times the batch:\n%s", n, plan)
	}
}
