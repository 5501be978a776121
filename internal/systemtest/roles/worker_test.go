package roles

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TestWorkersRunEverything: two workers under one worker role, fed by a
// producer role, run what a worker runs: plain tasks, retries, snoozes,
// outputs, failures for good, a workflow (its trigger releases the steps),
// a sequence (its trigger releases the next), a cluster-wide concurrency
// limit, a shared rate limit, a periodic schedule, and a cancellation of a
// running task requested by another session. No worker logs a permission
// error.
func TestWorkersRunEverything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, producerPool := b.as(t, migrations.Producer)
	producer := queue.New(producerPool)
	role := pgtest.Role(t, b.schema, migrations.Worker)
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: "limited", Max: 2}); err != nil {
		t.Fatal(err)
	}

	var attempts sync.Map // task ID -> attempts seen
	again := func(id int64) bool {
		n, _ := attempts.LoadOrStore(id, new(int))
		*n.(*int)++
		return *n.(*int) > 1
	}
	var mu sync.Mutex
	handlers := worker.Handlers{
		"job": func(context.Context, *worker.Task) error { return nil },
		"flaky": func(_ context.Context, task *worker.Task) error {
			mu.Lock()
			defer mu.Unlock()
			if !again(task.ID) {
				return errors.New("first attempt fails")
			}
			return nil
		},
		"snooze": func(_ context.Context, task *worker.Task) error {
			mu.Lock()
			defer mu.Unlock()
			if !again(task.ID) {
				return worker.Snooze(0)
			}
			return nil
		},
		"doomed": func(context.Context, *worker.Task) error { return errors.New("always fails") },
		"step": func(ctx context.Context, task *worker.Task) error {
			if _, err := worker.DependencyOutputs(ctx); err != nil {
				return err
			}
			return worker.SetOutput(ctx, map[string]int64{"id": task.ID})
		},
		"hang": func(ctx context.Context, _ *worker.Task) error {
			<-ctx.Done()
			return ctx.Err()
		},
	}
	var logs [2]logBuffer
	for i := range logs {
		start(t, pgtest.PoolAs(t, b.schema, role), worker.Config{
			Queues:     []string{"default", "limited", "rated"},
			RateLimits: []worker.RateLimit{{Queue: "rated", Limit: 1000, Per: time.Second}},
			Periodic:   []worker.PeriodicTask{{Name: "tick", Every: time.Second, Task: "job", Payload: "tick"}},
			Logger:     logs[i].logger(),
		}, handlers)
	}

	enqueue := func(name string, opts ...queue.Option) int64 {
		t.Helper()
		id, err := producer.Enqueue(ctx, name, nil, opts...)
		if err != nil {
			t.Fatalf("enqueueing %s: %v", name, err)
		}
		return id.ID
	}
	for range 5 {
		enqueue("job")
		enqueue("job", queue.WithQueue("limited"))
		enqueue("job", queue.WithQueue("rated"))
	}
	flaky, snoozed := enqueue("flaky"), enqueue("snooze")
	doomed := enqueue("doomed", queue.WithMaxAttempts(2))
	for range 3 {
		enqueue("job", queue.WithSequence("seq"))
	}
	wf, err := producer.EnqueueWorkflow(ctx, queue.Workflow{Steps: []queue.Step{
		{Name: "a", Task: "step"}, {Name: "b", Task: "step", DependsOn: []string{"a"}}, {Name: "c", Task: "step", DependsOn: []string{"a", "b"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	hung := enqueue("hang")
	waitFor(t, 10*time.Second, "the hanging task running", func() bool { return b.get(t, hung).Status == queue.StatusRunning })
	if _, err := b.client.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{IDs: []int64{hung}, Statuses: []queue.Status{queue.StatusRunning}}}); err != nil {
		t.Fatal(err)
	}

	waitFor(t, 20*time.Second, "every task finished", func() bool {
		return b.count(t, "status IN ('pending', 'running', 'waiting') AND NOT (name = 'job' AND payload = '\"tick\"')") == 0
	})
	for _, c := range []struct {
		id   int64
		want queue.Status
	}{{flaky, queue.StatusCompleted}, {snoozed, queue.StatusCompleted}, {doomed, queue.StatusFailed}, {hung, queue.StatusCancelled}, {wf.TaskIDs["c"], queue.StatusCompleted}} {
		if task := b.get(t, c.id); task.Status != c.want {
			t.Errorf("task %d (%s): %s, want %s; history %+v", c.id, task.Name, task.Status, c.want, task.Errors)
		}
	}
	if n := b.count(t, "status = 'completed' AND name = 'job' AND payload = 'null'"); n != 18 {
		t.Errorf("%d plain tasks completed, want 18", n)
	}
	if task := b.get(t, wf.TaskIDs["c"]); string(task.Output) == "" {
		t.Errorf("the workflow's last step recorded no output")
	}
	waitFor(t, 5*time.Second, "a periodic tick completed", func() bool {
		return b.count(t, "status = 'completed' AND payload = '\"tick\"'") > 0
	})
	noDenials(t, &logs[0], &logs[1])
}

// TestWorkerRescuesAnother: under one worker role, a worker whose lock
// session dies (terminated by the server, as when its process crashes)
// has its task rescued by the other worker, which runs it.
func TestWorkerRescuesAnother(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	role := pgtest.Role(t, b.schema, migrations.Worker)
	var logs [2]logBuffer
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	// One slot, which A's hanging handler keeps: A cannot claim the task
	// again, so B runs it.
	a, _ := start(t, pgtest.PoolAs(t, b.schema, role), worker.Config{Concurrency: 1, Logger: logs[0].logger()},
		worker.Handlers{"job": func(ctx context.Context, _ *worker.Task) error {
			<-ctx.Done()
			<-release
			return nil
		}})
	id, err := b.client.Enqueue(ctx, "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "A running the task", func() bool { return b.get(t, id.ID).WorkerID == a.ID() })
	bw, _ := start(t, pgtest.PoolAs(t, b.schema, role), worker.Config{Logger: logs[1].logger()},
		worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }})

	terminateLockSession(t, b.admin, a.ID())
	waitFor(t, 10*time.Second, "B completing A's task", func() bool {
		task := b.get(t, id.ID)
		return task.Status == queue.StatusCompleted && task.WorkerID == bw.ID()
	})
	task := b.get(t, id.ID)
	if len(task.Errors) != 1 || task.Errors[0].Outcome != "rescued" || task.Errors[0].WorkerID != a.ID() {
		t.Fatalf("history %+v, want one rescue of A's attempt", task.Errors)
	}
	once.Do(func() { close(release) })
	noDenials(t, &logs[0], &logs[1])
}

// TestWorkerRetentionAndLeases: a worker role in lease mode (elections in
// skiplock_leaders, leases renewed by heartbeat) runs a task that outlasts
// a renewal, its retention deletes finished tasks, and it resigns its
// elections when it stops.
func TestWorkerRetentionAndLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	role := pgtest.Role(t, b.schema, migrations.Worker)
	var logs logBuffer
	proceed := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(proceed) }) })
	_, stop := start(t, pgtest.PoolAs(t, b.schema, role), worker.Config{
		Mode: worker.ModeLease, LeaseDuration: time.Second,
		RetainCompleted: 100 * time.Millisecond, RetainFailed: 100 * time.Millisecond, RetainCancelled: 100 * time.Millisecond,
		Logger: logs.logger(),
	}, worker.Handlers{
		"job":  func(context.Context, *worker.Task) error { return nil },
		"slow": func(context.Context, *worker.Task) error { <-proceed; return nil },
	})
	slow, err := b.client.Enqueue(ctx, "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.EnqueueMany(ctx, []queue.NewTask{{Name: "job"}, {Name: "job"}, {Name: "job"}}); err != nil {
		t.Fatal(err)
	}
	var first time.Time
	waitFor(t, 10*time.Second, "the slow task leased", func() bool {
		task := b.get(t, slow.ID)
		return task.Status == queue.StatusRunning && lockedUntil(t, b.admin, slow.ID, &first)
	})
	waitFor(t, 10*time.Second, "its lease renewed", func() bool {
		var again time.Time
		return lockedUntil(t, b.admin, slow.ID, &again) && again.After(first)
	})
	once.Do(func() { close(proceed) })
	waitFor(t, 10*time.Second, "finished tasks deleted by retention", func() bool { return b.count(t, "true") == 0 })
	var leaders int
	if err := b.admin.QueryRow(ctx, "SELECT count(*) FROM skiplock_leaders").Scan(&leaders); err != nil || leaders == 0 {
		t.Fatalf("no election in skiplock_leaders (%d, %v)", leaders, err)
	}
	stop() // resigns its elections
	if err := b.admin.QueryRow(ctx, "SELECT count(*) FROM skiplock_leaders").Scan(&leaders); err != nil || leaders != 0 {
		t.Fatalf("%d elections left in skiplock_leaders after the worker stopped (%v)", leaders, err)
	}
	noDenials(t, &logs)
}

func lockedUntil(t *testing.T, pool *pgxpool.Pool, id int64, at *time.Time) bool {
	t.Helper()
	var v *time.Time
	if err := pool.QueryRow(context.Background(), "SELECT locked_until FROM skiplock_tasks WHERE id = $1", id).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != nil {
		*at = *v
	}
	return v != nil
}

// terminateLockSession ends a worker's lock session from the server side,
// as a crash of its process or a network cut would.
func terminateLockSession(t *testing.T, admin *pgxpool.Pool, workerID string) {
	t.Helper()
	var ok bool
	err := admin.QueryRow(context.Background(),
		"SELECT pg_terminate_backend(lock_backend_pid) FROM skiplock_workers WHERE id = $1", workerID).Scan(&ok)
	if err != nil || !ok {
		t.Fatalf("terminating the lock session of %s: %v %v", workerID, ok, err)
	}
}
