package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// terminateLockSession ends a worker's lock session from the server side,
// as a network cut or an operator's pg_terminate_backend would.
func (b *bundle) terminateLockSession(t *testing.T, w *worker.Worker) {
	t.Helper()
	var pid int32
	// The row is written when the lock session opens; a busy machine may
	// run the caller's setup before that has happened.
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err = b.pool.QueryRow(context.Background(),
			"SELECT lock_backend_pid FROM skiplock_workers WHERE id = $1", w.ID()).Scan(&pid)
		if err == nil && pid != 0 || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("worker %s's row in skiplock_workers: %v", w.ID(), err)
	}
	var ok bool
	if err := b.pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminating backend %d: %v %v", pid, ok, err)
	}
}

// TestRescueAndFencing: a worker whose lock session is terminated while its
// process lives on has its handler cancelled; its task is rescued and run by
// another worker; and when the first handler returns anyway, its completion
// is discarded.
func TestRescueAndFencing(t *testing.T) {
	t.Parallel()
	b := setup(t)

	aCancelled := make(chan struct{})
	// A handler that finishes its work regardless: it returns success only
	// once the task has run again elsewhere, so its completion must lose.
	ranElsewhere := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(ranElsewhere) }) }
	defer release()
	// One slot, which A's hanging handler keeps: A cannot claim the task
	// again, so B runs it.
	var began atomic.Bool // a handler not yet called when the lock goes is never called
	a, stopA := start(t, pgtest.NewPool(t, b.schema), worker.Config{Concurrency: 1}, worker.Handlers{"job": func(ctx context.Context, task *worker.Task) error {
		began.Store(true)
		<-ctx.Done()
		close(aCancelled)
		<-ranElsewhere
		return nil
	}})
	id := b.enqueue(t, "job", nil)
	waitFor(t, 10*time.Second, "A running the task", func() bool { return began.Load() && b.get(t, id).WorkerID == a.ID() })

	bw, _ := start(t, pgtest.NewPool(t, b.schema), worker.Config{}, worker.Handlers{"job": func(ctx context.Context, task *worker.Task) error {
		return nil
	}})
	killed := time.Now()
	b.terminateLockSession(t, a)
	waitFor(t, 5*time.Second, "rescue and completion by B", func() bool {
		task := b.get(t, id)
		return task.Status == queue.StatusCompleted && task.WorkerID == bw.ID()
	})
	t.Logf("terminate to completion elsewhere: %s", time.Since(killed))

	select {
	case <-aCancelled:
	case <-time.After(pgtest.Patient(10 * time.Second)):
		t.Fatal("A's handler was not cancelled after its lock session died")
	}
	// A's fenced write: its handler returns success now, and stopping A
	// waits for its completer to write.
	release()
	stopA()
	task := b.get(t, id)
	// The rescue gave the attempt back: B's run was attempt 1 again.
	if task.Status != queue.StatusCompleted || task.WorkerID != bw.ID() || task.Attempt != 1 || task.Crashes != 0 {
		t.Fatalf("fenced worker overwrote the task: %+v", task)
	}
	if len(task.Errors) != 1 || task.Errors[0].Outcome != "rescued" || task.Errors[0].WorkerID != a.ID() || task.Errors[0].Attempt != 1 ||
		task.Errors[0].Crash {
		t.Fatalf("error history = %+v, want one rescue of A's attempt 1, not counted as a crash: A lives", task.Errors)
	}
	waitFor(t, 5*time.Second, "no locks left", func() bool { return b.taskLocks(t) == 0 })
}

// TestOutcomeOfALostClaim: a claim the server loses leaves its task
// pending with the attempt unspent. The lock session commits claims without
// waiting for the WAL flush, so a claim can be lost when the primary fails
// over before the claim reached the standby, or crashes before the flush.
// The same worker may then claim the task again on its new lock session,
// with the same attempt number. The lost claim's run ends late (its
// handler was cancelled when the session died), and its outcome must not
// land on the new claim: the fence is the claim, not the worker and the
// attempt.
func TestOutcomeOfALostClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the worker's log:\n%s", logs.String())
		}
	})
	// Each run waits: a cancelled one (its lock session died) until it is
	// released, and then returns its context's error (outcome lock_lost);
	// one never cancelled until it is released, and then completes.
	type run struct {
		attempt   int
		claimed   time.Time
		cancelled chan struct{}
		release   chan struct{}
	}
	started := make(chan *run, 16)
	finish := make(chan struct{})
	defer close(finish)
	handler := func(ctx context.Context, task *worker.Task) error {
		r := &run{attempt: task.Attempt, claimed: task.StartedAt, cancelled: make(chan struct{}), release: make(chan struct{})}
		started <- r
		select {
		case <-ctx.Done():
			close(r.cancelled)
			select {
			case <-r.release:
			case <-finish:
			}
			return ctx.Err()
		case <-r.release:
			return nil
		case <-finish:
			return nil
		}
	}
	id := b.enqueue(t, "job", nil)
	nextRun := func(what string) *run {
		t.Helper()
		select {
		case r := <-started:
			return r
		case <-time.After(pgtest.Patient(10 * time.Second)):
			t.Fatalf("no %s; the task: %+v", what, b.get(t, id))
			return nil
		}
	}
	a, stopA := start(t, b.pool, worker.Config{Concurrency: 8, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		worker.Handlers{"job": handler})

	// The claim is lost with the session, as on a standby it never
	// reached: the task is pending again with its attempt unspent. Both in
	// one transaction, so that the rescuer never sees the task orphaned.
	// Should the session be lost by itself meanwhile (a ping that timed
	// out on a loaded machine), the task is claimed again with the next
	// attempt, and the scenario is played again from that claim.
	var lost, claimed *run
	cur := nextRun("first run")
	for try := 1; claimed == nil; try++ {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var status string
		var startedAt *time.Time
		if err := tx.QueryRow(ctx, "SELECT status, started_at FROM skiplock_tasks WHERE id = $1 FOR UPDATE", id).Scan(&status, &startedAt); err != nil {
			t.Fatal(err)
		}
		if status != "running" || startedAt == nil || !startedAt.Equal(cur.claimed) {
			tx.Rollback(ctx)
			close(cur.release)
			cur = nextRun("run of the task's next claim")
			continue
		}
		if _, err := tx.Exec(ctx, `UPDATE skiplock_tasks SET status = 'pending', attempt = attempt - 1,
			worker_id = NULL, started_at = NULL WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		b.terminateLockSession(t, a)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-cur.cancelled:
		case <-time.After(pgtest.Patient(10 * time.Second)):
			t.Fatal("the lost claim's run was not cancelled when its lock session died")
		}
		next := nextRun("run of a new claim")
		switch {
		case next.attempt == cur.attempt:
			lost, claimed = cur, next
		case try == 3:
			t.Fatalf("three times the new claim had another attempt than the lost one (last: %d, %d)", next.attempt, cur.attempt)
		default:
			t.Logf("the new claim has attempt %d, the lost one %d (the session was lost again meanwhile); again", next.attempt, cur.attempt)
			close(cur.release)
			cur = next
		}
	}

	// The lost claim's run ends now, while the new claim runs: its outcome
	// (lock lost: back to pending) goes to the outcome writer.
	close(lost.release)
	waitFor(t, 5*time.Second, "the lost claim's outcome written or discarded", func() bool {
		task := b.get(t, id)
		return strings.Contains(logs.String(), "outcomes discarded") || task.Status != queue.StatusRunning ||
			task.StartedAt == nil || !task.StartedAt.Equal(claimed.claimed)
	})
	task := b.get(t, id)
	if task.Status != queue.StatusRunning || task.WorkerID != a.ID() || task.Attempt != claimed.attempt ||
		task.StartedAt == nil || !task.StartedAt.Equal(claimed.claimed) {
		t.Fatalf("the lost claim's outcome landed on the new claim: the task is %s, attempt %d, worker %q, started %v; want running, attempt %d, %q, started %v",
			task.Status, task.Attempt, task.WorkerID, task.StartedAt, claimed.attempt, a.ID(), claimed.claimed)
	}
	close(claimed.release)
	waitFor(t, 5*time.Second, "the new claim completed", func() bool { return b.get(t, id).Status == queue.StatusCompleted })
	stopA()
	task = b.get(t, id)
	if task.Attempt != claimed.attempt || task.StartedAt == nil || !task.StartedAt.Equal(claimed.claimed) {
		t.Fatalf("completed as attempt %d claimed at %v; want the new claim's, attempt %d at %v", task.Attempt, task.StartedAt, claimed.attempt, claimed.claimed)
	}
	select {
	case r := <-started:
		t.Fatalf("the task ran again (attempt %d) after the new claim: the lost claim's outcome returned it to the queue", r.attempt)
	default:
	}
}

// TestRescueRechecksTheClaim: the rescuer picks its orphans from a
// snapshot and pg_locks, and then updates them. A task handed back with
// its attempt refunded (a shutdown, a snooze) and claimed again in between
// has the attempt the rescuer saw; only the claim's started_at tells the
// new claim from the orphan, and the rescuer leaves it alone.
func TestRescueRechecksTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var id, class int64
	if err := b.pool.QueryRow(ctx, `INSERT INTO skiplock_tasks (name, status, attempt, worker_id, started_at)
		VALUES ('job', 'running', 1, 'a', now() - interval '1 minute') RETURNING id, 'skiplock_tasks'::regclass::oid::bigint`).Scan(&id, &class); err != nil {
		t.Fatal(err)
	}
	// The row is held while the rescuer runs: it decides, then waits for
	// the row to update it.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM skiplock_tasks WHERE id = $1 FOR UPDATE", id); err != nil {
		t.Fatal(err)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var rescuer int32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&rescuer); err != nil {
		t.Fatal(err)
	}
	type rescue struct {
		rows []db.TaskRescueOrphansRow
		err  error
	}
	done := make(chan rescue, 1)
	go func() {
		rows, err := db.New().TaskRescueOrphans(ctx, conn, db.TaskRescueOrphansParams{LockClassOid: class, ToID: math.MaxInt64})
		done <- rescue{rows, err}
	}()
	waitFor(t, 5*time.Second, "the rescuer waiting for the task's row", func() bool {
		var waiting bool
		err := b.pool.QueryRow(ctx, "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", rescuer).Scan(&waiting)
		return err == nil && waiting
	})
	// Handed back with the attempt refunded and claimed again, by another
	// worker: running, attempt 1, no lease, as the rescuer saw it.
	if _, err := tx.Exec(ctx, "UPDATE skiplock_tasks SET worker_id = 'b', started_at = now() WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.rows) != 0 {
		t.Fatalf("the rescuer returned %+v: a task claimed again after it decided", r.rows)
	}
	if task := b.get(t, id); task.Status != queue.StatusRunning || task.WorkerID != "b" {
		t.Fatalf("the new claim's task is %s by %q", task.Status, task.WorkerID)
	}
}

// TestRescueThousands: with thousands of tasks running and locked, the
// rescuer leaves every one alone; when their session dies it returns them
// all within seconds.
func TestRescueThousands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 3000
	tasks := make([]queue.NewTask, n)
	for i := range tasks {
		tasks[i] = queue.NewTask{Name: "hold"}
	}
	if _, err := b.client.EnqueueMany(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
	hold := func(ctx context.Context, task *worker.Task) error { <-ctx.Done(); return ctx.Err() }
	aCfg := worker.Config{Concurrency: n, AbandonAfter: time.Second}
	var passes atomic.Int64
	worker.SetRescuePassed(&aCfg, func() { passes.Add(1) })
	a, stopA := start(t, pgtest.NewPool(t, b.schema), aCfg, worker.Handlers{"hold": hold})
	waitFor(t, 30*time.Second, "all running", func() bool { return b.count(t, "status = 'running'") == n })
	// The rescuer (A itself here) runs every 100ms; a dozen passes with
	// every lock held must rescue nothing.
	waitPasses(t, &passes, 12)
	if r := b.count(t, "errors <> '[]'"); r != 0 {
		t.Fatalf("rescuer touched %d tasks whose locks are held", r)
	}

	// A watcher that claims nothing but can be elected rescuer.
	start(t, pgtest.NewPool(t, b.schema), worker.Config{Queues: []string{"elsewhere"}}, worker.Handlers{"hold": hold})
	// A reconnects within 100 ms and would claim the rescued tasks again.
	if err := b.client.PauseQueue(context.Background(), "default"); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	b.terminateLockSession(t, a)
	stopA() // A would otherwise claim the rescued tasks again
	// Each is back in line with one entry: "rescued" by the elected
	// rescuer, or "lock_lost" when A's own handler returned first and A
	// recorded it (a fenced write that wins while nobody else claimed it),
	// or "abandoned" when, on a loaded machine, A's cancelled handler did
	// not return within AbandonAfter.
	returned := false
	defer func() {
		if !returned {
			t.Logf("tasks: %s", b.breakdown(t))
		}
	}()
	waitFor(t, 5*time.Second, fmt.Sprintf("all %d tasks back to pending", n), func() bool {
		return b.count(t, `status = 'pending' AND jsonb_array_length(errors) = 1
			AND errors->0->>'outcome' IN ('rescued', 'lock_lost', 'abandoned')`) == n
	})
	returned = true
	t.Logf("%d rescued, %d recorded by their own worker", b.count(t, "errors->0->>'outcome' = 'rescued'"),
		b.count(t, "errors->0->>'outcome' = 'lock_lost'"))
	t.Logf("rescued %d tasks %s after their session ended", n, time.Since(killed))
}

// waitPasses waits until the rescuer counting passes has made n more.
func waitPasses(t *testing.T, passes *atomic.Int64, n int64) {
	t.Helper()
	from := passes.Load()
	waitFor(t, time.Duration(n)*100*time.Millisecond, fmt.Sprintf("%d more rescue passes", n), func() bool {
		return passes.Load() >= from+n
	})
}

func TestTimeoutRetriesThenFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, "slow", nil, queue.WithTimeout(100*time.Millisecond), queue.WithMaxAttempts(2))
	start(t, b.pool, worker.Config{}, worker.Handlers{"slow": func(ctx context.Context, task *worker.Task) error {
		<-ctx.Done()
		return ctx.Err()
	}})
	waitFor(t, 10*time.Second, "failure", func() bool { return b.get(t, id).Status == queue.StatusFailed })
	task := b.get(t, id)
	if len(task.Errors) != 2 {
		t.Fatalf("errors = %+v", task.Errors)
	}
	for _, e := range task.Errors {
		if e.Outcome != "timeout" || e.Error != "timed out after 100ms: context deadline exceeded" {
			t.Fatalf("entry = %+v", e)
		}
		if d := e.FinishedAt.Sub(e.StartedAt); d < 90*time.Millisecond {
			t.Fatalf("attempt ended after %s, before its timeout", d)
		}
	}
}

// TestWorkerTaskTimeout: tasks without a timeout of their own time out at
// Config.TaskTimeout, whose deadlines one timer keeps for every task: each
// handler's context reports its deadline and ends there, the others'
// meanwhile completing.
func TestWorkerTaskTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const timeout = 150 * time.Millisecond
	var slow []int64
	for range 3 {
		slow = append(slow, b.enqueue(t, "slow", nil, queue.WithMaxAttempts(1)))
	}
	quick := b.enqueue(t, "quick", nil)
	own := b.enqueue(t, "slow", nil, queue.WithTimeout(time.Hour), queue.WithMaxAttempts(1))
	type seen struct {
		id          int64
		hasDeadline bool
		left        time.Duration
		err         error
	}
	seenc := make(chan seen, 10)
	ownStarted := make(chan context.Context, 1)
	start(t, b.pool, worker.Config{TaskTimeout: timeout}, worker.Handlers{
		"slow": func(ctx context.Context, task *worker.Task) error {
			d, ok := ctx.Deadline()
			if task.ID == own {
				ownStarted <- ctx
				return nil
			}
			left := time.Until(d)
			<-ctx.Done()
			seenc <- seen{task.ID, ok, left, ctx.Err()}
			return ctx.Err()
		},
		"quick": func(ctx context.Context, task *worker.Task) error { return nil },
	})
	for range slow {
		var s seen
		select {
		case s = <-seenc:
		case <-time.After(10 * time.Second):
			t.Fatal("a slow handler did not end")
		}
		if !s.hasDeadline || s.left <= 0 || s.left > timeout || !errors.Is(s.err, context.DeadlineExceeded) {
			t.Errorf("task %d: deadline %v, %s ahead at its start; ended with %v", s.id, s.hasDeadline, s.left, s.err)
		}
	}
	for _, id := range slow {
		waitFor(t, 10*time.Second, "failure", func() bool { return b.get(t, id).Status == queue.StatusFailed })
		e := b.get(t, id).Errors[0]
		if e.Outcome != "timeout" || e.Error != "timed out after 150ms: context deadline exceeded" {
			t.Fatalf("entry = %+v", e)
		}
		if d := e.FinishedAt.Sub(e.StartedAt); d < timeout-10*time.Millisecond {
			t.Fatalf("attempt ended after %s, before its timeout", d)
		}
	}
	waitFor(t, 10*time.Second, "quick task", func() bool { return b.get(t, quick).Status == queue.StatusCompleted })
	// A task's own timeout stands for the worker's.
	var ctx context.Context
	select {
	case ctx = <-ownStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("the task with its own timeout did not start")
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) < 50*time.Minute {
		t.Errorf("a task with a timeout of an hour has deadline %v, %v", d, ok)
	}
	waitFor(t, 10*time.Second, "own-timeout task", func() bool { return b.get(t, own).Status == queue.StatusCompleted })
}

// TestAbandonedHandler: a handler that ignores its context past the grace
// period is abandoned: its task recorded, its lock released, its slot reused.
func TestAbandonedHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stuck := b.enqueue(t, "stuck", nil, queue.WithTimeout(100*time.Millisecond), queue.WithMaxAttempts(1))
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	start(t, b.pool, worker.Config{Concurrency: 1, AbandonAfter: 200 * time.Millisecond}, worker.Handlers{
		"stuck": func(ctx context.Context, task *worker.Task) error { <-release; return nil },
		"next":  func(ctx context.Context, task *worker.Task) error { return nil },
	})
	waitFor(t, 10*time.Second, "abandonment", func() bool { return b.get(t, stuck).Status == queue.StatusFailed })
	task := b.get(t, stuck)
	if task.Errors[0].Outcome != "abandoned" {
		t.Fatalf("entry = %+v", task.Errors[0])
	}
	waitFor(t, 5*time.Second, "lock released", func() bool { return b.taskLocks(t) == 0 })
	// The only slot is free again although the stuck goroutine lives on.
	next := b.enqueue(t, "next", nil)
	waitFor(t, 10*time.Second, "next task", func() bool { return b.get(t, next).Status == queue.StatusCompleted })
}

// TestLockSessionReconnects: after its session is terminated, a lone worker
// reconnects and goes on working.
func TestLockSessionReconnects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var cause atomic.Value
	var began atomic.Bool // a handler not yet called when the lock goes is never called
	w, _ := start(t, b.pool, worker.Config{}, worker.Handlers{
		"hold": func(ctx context.Context, task *worker.Task) error {
			began.Store(true)
			<-ctx.Done()
			cause.Store(context.Cause(ctx))
			return ctx.Err()
		},
		"quick": func(context.Context, *worker.Task) error { return nil },
	})
	held := b.enqueue(t, "hold", nil, queue.WithMaxAttempts(1))
	waitFor(t, 10*time.Second, "running", func() bool { return began.Load() && b.get(t, held).Status == queue.StatusRunning })
	b.terminateLockSession(t, w)
	waitFor(t, 5*time.Second, "handler cancelled", func() bool { return cause.Load() != nil })
	if err, _ := cause.Load().(error); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancellation cause = %v", err)
	}
	quick := b.enqueue(t, "quick", nil)
	waitFor(t, 10*time.Second, "work after reconnect", func() bool { return b.get(t, quick).Status == queue.StatusCompleted })
	waitFor(t, 5*time.Second, "held task settled", func() bool { return b.get(t, held).Status == queue.StatusFailed })
}

// TestOneRescuerElected: of several workers exactly one holds the rescuer's
// lock, and another session takes over within seconds of its ending (the
// same worker, reconnected, may win again).
func TestOneRescuerElected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noop := worker.Handlers{"x": func(context.Context, *worker.Task) error { return nil }}
	for range 3 {
		start(t, pgtest.NewPool(t, b.schema), worker.Config{}, noop)
	}
	// The rescuer's lock: bigint key (class << 32) | 1, so classid = the
	// table's OID, objid = 1, objsubid = 1.
	leader := func() (holders int, pid int32) {
		err := b.pool.QueryRow(context.Background(), `
			SELECT count(*), coalesce(min(pid), 0) FROM pg_locks
			WHERE locktype = 'advisory' AND objsubid = 1 AND objid = 1 AND granted
			  AND classid = 'skiplock_tasks'::regclass::oid`).Scan(&holders, &pid)
		if err != nil {
			t.Fatal(err)
		}
		return holders, pid
	}
	var first int32
	waitFor(t, 5*time.Second, "a rescuer elected", func() bool {
		n, pid := leader()
		first = pid
		return n == 1
	})
	var ok bool
	if err := b.pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", first).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminating the rescuer's session: %v", err)
	}
	killed := time.Now()
	waitFor(t, 5*time.Second, "a new rescuer", func() bool {
		n, pid := leader()
		return n == 1 && pid != first
	})
	t.Logf("rescuer taken over %s after its session ended", time.Since(killed))
}

// breakdown describes the tasks by status, attempt and outcomes, for
// failure messages.
func (b *bundle) breakdown(t *testing.T) string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT status || ' attempt ' || attempt || ' [' || outcomes || ']: ' || count(*)
		FROM (SELECT status, attempt, coalesce((SELECT string_agg(e->>'outcome', ',') FROM jsonb_array_elements(errors) AS e), '') AS outcomes
		      FROM skiplock_tasks) AS t
		GROUP BY status, attempt, outcomes ORDER BY 1`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var s string
		rows.Scan(&s)
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
