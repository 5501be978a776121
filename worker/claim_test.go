// The claim: every task once across workers, one advisory lock per running
// task, wake-ups, due times, priority order, the cursor and queues apart.

package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

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

// holdClaimTurn takes a queue's claim turn on a connection of its own, as
// a claim that stalls with it would hold it, until the test ends.
func (b *bundle) holdClaimTurn(t *testing.T, queueName string) (turnClass, turnObj int64) {
	t.Helper()
	ctx := context.Background()
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Exec(context.Background(), "SELECT pg_advisory_unlock_all()")
		conn.Release()
	})
	var key int64
	if err := conn.QueryRow(ctx, `SELECT ('skiplock_tasks'::regclass::oid::bigint << 32) | 2147483648
		| (hashtext($1)::bigint & 2147483647)`, queueName).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	return int64(uint64(key) >> 32), key & 0xffffffff
}

// turnWaiter says whether a worker's lock session is waiting for the claim
// turn (classid, objid) now.
func (b *bundle) turnWaiter(w *worker.Worker, class, obj int64) (waiting bool, err error) {
	err = b.pool.QueryRow(context.Background(), `SELECT EXISTS (
		SELECT 1 FROM pg_locks AS l JOIN skiplock_workers AS w ON w.lock_backend_pid = l.pid
		WHERE w.id = $1 AND l.locktype = 'advisory' AND l.objsubid = 1 AND NOT l.granted
		  AND l.classid::bigint = $2 AND l.objid::bigint = $3)`, w.ID(), class, obj).Scan(&waiting)
	return waiting, err
}

// TestClaimTurns: claims of a queue take turns across workers, and a turn
// held too long (its holder stalled mid-claim) is not waited for: the
// claim goes ahead without it.
func TestClaimTurns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	class, obj := b.holdClaimTurn(t, "default")
	w, _ := start(t, b.pool, worker.Config{}, worker.Handlers{"job": func(context.Context, *worker.Task) error {
		return nil
	}})
	waitFor(t, 5*time.Second, "the worker's claim waiting for its turn", func() bool {
		waiting, err := b.turnWaiter(w, class, obj)
		if err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	for range 3 {
		b.enqueue(t, "job", nil)
	}
	waitFor(t, 10*time.Second, "3 tasks completed while the turn is held elsewhere", func() bool {
		return b.count(t, "status = 'completed'") == 3
	})
}

// TestParallelClaimsTakeNoTurn: with ParallelClaims a worker's claims never
// wait for their queue's turn.
func TestParallelClaimsTakeNoTurn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	class, obj := b.holdClaimTurn(t, "default")
	cs := &claims{}
	w, _ := start(t, b.pool, worker.Config{ParallelClaims: true, Observer: cs}, worker.Handlers{"job": func(context.Context, *worker.Task) error {
		return nil
	}})
	// Sampled every millisecond while the worker claims 5 times: a claim
	// in turns waits up to 200 ms, and would be seen.
	stop := make(chan struct{})
	type sample struct {
		waited bool
		err    error
	}
	sampled := make(chan sample, 1)
	go func() {
		var s sample
		for {
			select {
			case <-stop:
				sampled <- s
				return
			case <-time.After(time.Millisecond):
				waiting, err := b.turnWaiter(w, class, obj)
				s.waited, s.err = s.waited || waiting, errors.Join(s.err, err)
			}
		}
	}()
	waitClaims(t, 5, cs)
	close(stop)
	if s := <-sampled; s.err != nil || s.waited {
		t.Fatalf("a worker with ParallelClaims waited for its queue's claim turn: %v (sampling: %v)", s.waited, s.err)
	}
}
