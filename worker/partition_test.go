package worker_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// logBuffer collects a worker's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger(also io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(b, also), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// rescuerPID is the backend holding the rescuer's election, or 0.
func (b *bundle) rescuerPID(t *testing.T) int32 {
	t.Helper()
	var pid int32
	err := b.pool.QueryRow(context.Background(), `
		SELECT coalesce(min(pid), 0) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND objid = 1 AND granted
		  AND classid = 'skiplock_tasks'::regclass::oid`).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func (b *bundle) lockPID(t *testing.T, w *worker.Worker) int32 {
	t.Helper()
	var pid int32
	if err := b.pool.QueryRow(context.Background(), "SELECT coalesce((SELECT lock_backend_pid FROM skiplock_workers WHERE id = $1), 0)", w.ID()).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestSilentNetwork: a worker whose connections go silent (nothing
// forwarded, nothing closed) while it holds tasks and the rescuer's
// election stops its handlers within HealthInterval + PingTimeout; another
// worker ends its zombie session once its heartbeat is StaleAfter old, takes
// the election over and runs the tasks; when the network comes back the
// cut-off worker's late outcomes are fenced off and it works again.
func TestSilentNetwork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Timers short for a test, but not so short that a ping on a loaded
	// machine (CI runs many packages at once) times out while the network
	// is fine.
	const stale, ping = 4 * time.Second, time.Second
	cfgA := pgtest.Config(t, b.schema)
	link := pgtest.NewFreezer(t, cfgA)
	causes := make(chan error, 64)
	var live atomic.Int32 // handlers begun and not returned
	logsA, logsB := &logBuffer{}, &logBuffer{}
	a, _ := start(t, pgtest.PoolFromConfig(t, cfgA), worker.Config{
		Queues: []string{"default", "after"}, Concurrency: 4, StaleAfter: stale, PingTimeout: ping,
		Logger: logsA.logger(io.Discard),
	}, worker.Handlers{
		"hold": func(ctx context.Context, task *worker.Task) error {
			live.Add(1)
			defer live.Add(-1)
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		},
		"quick": func(context.Context, *worker.Task) error { return nil },
	})
	waitFor(t, 10*time.Second, "A elected rescuer", func() bool { pid := b.rescuerPID(t); return pid != 0 && pid == b.lockPID(t, a) })
	var ids []int64
	for range 4 {
		ids = append(ids, b.enqueue(t, "hold", nil))
	}
	// Running means the handler began: a claim whose answer the cut holds
	// back, or a handler not yet called, is never cancelled (the task is
	// rescued all the same), and the test looks for 4 cancellations.
	waitFor(t, 10*time.Second, "A running 4 tasks", func() bool {
		return live.Load() == 4 && b.count(t, "status = 'running' AND worker_id = $1", a.ID()) == 4
	})
	bw, _ := start(t, pgtest.NewPool(t, b.schema), worker.Config{StaleAfter: stale, PingTimeout: ping, Logger: logsB.logger(io.Discard)},
		worker.Handlers{"hold": func(context.Context, *worker.Task) error { return nil }})
	zombie := b.lockPID(t, a)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("A's log:\n%s\nB's log:\n%s", logsA.String(), logsB.String())
		}
	})
	for len(causes) > 0 { // from a session lost before the cut, if any
		<-causes
	}

	link.Freeze()
	frozen := time.Now()
	for range 4 {
		select {
		case cause := <-causes:
			if cause == nil || !strings.Contains(cause.Error(), "lost the lock session") {
				t.Fatalf("A's handler cancelled with cause %v, want a lost lock session", cause)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("A's handlers were not cancelled while its network was silent")
		}
	}
	t.Logf("A stopped its handlers %s after its network went silent (HealthInterval 100ms + PingTimeout %s)", time.Since(frozen), ping)

	waitFor(t, 60*time.Second, "B running A's tasks", func() bool {
		return b.count(t, "status = 'completed' AND worker_id = $1 AND id = ANY($2)", bw.ID(), ids) == 4
	})
	t.Logf("A's tasks completed by B %s after the network went silent (StaleAfter %s)", time.Since(frozen), stale)
	var alive int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", zombie).Scan(&alive); err != nil {
		t.Fatal(err)
	}
	if alive != 0 {
		t.Fatalf("A's zombie lock session (backend %d) is still alive", zombie)
	}
	if !strings.Contains(logsB.String(), "ended the lock session of a worker whose heartbeat is stale") {
		t.Fatalf("B did not say it ended A's session; its log:\n%s", logsB.String())
	}
	waitFor(t, 10*time.Second, "B elected rescuer", func() bool { pid := b.rescuerPID(t); return pid != 0 && pid == b.lockPID(t, bw) })

	link.Unfreeze()
	// A works again, without a restart: only it claims from "after".
	quick := b.enqueue(t, "quick", nil, queue.WithQueue("after"))
	waitFor(t, 30*time.Second, "A running a task after the network came back", func() bool {
		task := b.get(t, quick)
		return task.Status == queue.StatusCompleted && task.WorkerID == a.ID()
	})
	// A's late outcomes (lock_lost) were fenced off: each task is B's
	// completion of attempt 1, given back by the rescue of A's attempt 1.
	for _, id := range ids {
		task := b.get(t, id)
		if task.Status != queue.StatusCompleted || task.WorkerID != bw.ID() || task.Attempt != 1 ||
			len(task.Errors) != 1 || task.Errors[0].Outcome != "rescued" || task.Errors[0].WorkerID != a.ID() {
			t.Fatalf("task %d = %s by %s attempt %d, history %+v; want B's completion of attempt 1 after A's rescued attempt 1",
				id, task.Status, task.WorkerID, task.Attempt, task.Errors)
		}
	}
}

// TestLockLostKeepsPlace: a task given up as lock_lost goes back to pending
// as a rescued one does, whichever writes first: run_at unchanged (not
// behind the backlog) and the attempt given back, on its last attempt too
// (it is not failed).
func TestLockLostKeepsPlace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs sync.Map
	w, _ := start(t, b.pool, worker.Config{Concurrency: 1, RescueInterval: time.Hour}, worker.Handlers{
		"hold": func(ctx context.Context, task *worker.Task) error {
			if _, again := runs.LoadOrStore(task.ID, true); again {
				return nil
			}
			<-ctx.Done()
			return ctx.Err()
		},
	})
	// Pause the queue once the task runs, so that the lock_lost outcome is
	// seen before a claim takes the task again.
	id := b.enqueue(t, "hold", nil, queue.WithMaxAttempts(1))
	before := b.get(t, id)
	waitFor(t, 10*time.Second, "running", func() bool { return b.get(t, id).Status == queue.StatusRunning })
	if err := b.client.PauseQueue(context.Background(), "default"); err != nil {
		t.Fatal(err)
	}
	b.terminateLockSession(t, w)
	waitFor(t, 10*time.Second, "lock_lost written", func() bool { return b.get(t, id).Status == queue.StatusPending })
	task := b.get(t, id)
	if len(task.Errors) != 1 || task.Errors[0].Outcome != "lock_lost" {
		t.Fatalf("history = %+v, want one lock_lost", task.Errors)
	}
	if !task.RunAt.Equal(before.RunAt) || task.Attempt != 0 || task.Errors[0].Attempt != 1 {
		t.Fatalf("after lock_lost run_at = %s attempt %d (entry's %d); want run_at %s kept, attempt 1 given back",
			task.RunAt, task.Attempt, task.Errors[0].Attempt, before.RunAt)
	}
	if err := b.client.ResumeQueue(context.Background(), "default"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "completed", func() bool { return b.get(t, id).Status == queue.StatusCompleted })
}

// TestStaleSessionOfAnotherRole: a worker may not end the lock session of a
// worker that runs as another role (without pg_signal_backend): it says so
// once, leaves the session alone, and its tasks wait for the server's TCP
// keepalives. Roles are cluster-wide: each run makes two of its own and drops
// them.
func TestStaleSessionOfAnotherRole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	suffix := strings.TrimPrefix(b.schema, "sltest_")
	owner, other := "sltest_owner_"+suffix, "sltest_other_"+suffix
	for _, role := range []string{owner, other} {
		for _, stmt := range []string{
			"CREATE ROLE " + role + " LOGIN",
			"GRANT USAGE ON SCHEMA " + b.schema + " TO " + role,
			"GRANT ALL ON ALL TABLES IN SCHEMA " + b.schema + " TO " + role,
			"GRANT ALL ON ALL SEQUENCES IN SCHEMA " + b.schema + " TO " + role,
		} {
			if _, err := b.pool.Exec(ctx, stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		t.Cleanup(func() {
			// Before the schema goes (cleanups run last first): the
			// grants go with DROP OWNED.
			b.pool.Exec(ctx, "DROP OWNED BY "+role)
			if _, err := b.pool.Exec(ctx, "DROP ROLE "+role); err != nil {
				t.Errorf("dropping role %s: %v", role, err)
			}
		})
	}

	// The zombie: a lock session of a worker running as owner, holding a
	// task's lock, whose heartbeat goes stale.
	cfg := pgtest.Config(t, b.schema)
	cfg.ConnConfig.User = owner
	cfg.ConnConfig.RuntimeParams["application_name"] = "skiplock lock session zombie"
	zpool := pgtest.PoolFromConfig(t, cfg)
	zombie, err := zpool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Release()
	id := b.enqueue(t, "job", nil)
	_, err = zombie.Exec(ctx, `
		INSERT INTO skiplock_workers (id, host, pid, queues, lock_backend_pid) VALUES ('zombie', 'h', 1, '{default}', pg_backend_pid())`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = zombie.Exec(ctx, `
		UPDATE skiplock_tasks SET status = 'running', attempt = 1, worker_id = 'zombie', started_at = now()
		WHERE id = $1 AND pg_advisory_lock(('x' || lpad(to_hex('skiplock_tasks'::regclass::oid::bigint), 8, '0'))::bit(32)::integer, id::bit(32)::integer) IS NOT NULL`, id)
	if err != nil {
		t.Fatal(err)
	}
	var zpid int32
	if err := zombie.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&zpid); err != nil {
		t.Fatal(err)
	}

	cfg = pgtest.Config(t, b.schema)
	cfg.ConnConfig.User = other
	logs := &logBuffer{}
	wcfg := worker.Config{StaleAfter: time.Second, PingTimeout: 200 * time.Millisecond, Logger: logs.logger(io.Discard)}
	var passes atomic.Int64
	worker.SetRescuePassed(&wcfg, func() { passes.Add(1) })
	start(t, pgtest.PoolFromConfig(t, cfg), wcfg,
		worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }})
	const warning = "cannot end the lock session of a worker whose heartbeat is stale"
	waitFor(t, 30*time.Second, "a warning that the session cannot be ended", func() bool { return strings.Contains(logs.String(), warning) })
	// A few more rescue passes (every 100ms): still one warning, the
	// session alive, the task running.
	waitPasses(t, &passes, 10)
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Fatalf("warned %d times, want once:\n%s", n, logs.String())
	}
	var alive int
	if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", zpid).Scan(&alive); err != nil || alive != 1 {
		t.Fatalf("the other role's session was ended (%d alive, %v)", alive, err)
	}
	if task := b.get(t, id); task.Status != queue.StatusRunning {
		t.Fatalf("task %s, want still running: its lock is held", task.Status)
	}
}
