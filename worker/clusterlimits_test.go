package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// gauge records, in a table every worker writes to, how many handlers of
// each scope run at once and the most that ever did: the proof of a
// cluster-wide limit is in the database, not in one process's memory.
type gauge struct{ b *bundle }

func newGauge(t *testing.T, b *bundle) gauge {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(),
		"CREATE TABLE limit_gauge (scope text PRIMARY KEY, cur integer NOT NULL DEFAULT 0, peak integer NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	return gauge{b}
}

// enter and leave bracket a handler's work in every scope it falls under.
func (g gauge) enter(ctx context.Context, scopes ...string) error {
	for _, s := range scopes {
		if _, err := g.b.pool.Exec(ctx, `
			INSERT INTO limit_gauge AS g (scope, cur, peak) VALUES ($1, 1, 1)
			ON CONFLICT (scope) DO UPDATE SET cur = g.cur + 1, peak = greatest(g.peak, g.cur + 1)`, s); err != nil {
			return err
		}
	}
	return nil
}

func (g gauge) leave(ctx context.Context, scopes ...string) error {
	for _, s := range scopes {
		if _, err := g.b.pool.Exec(ctx, "UPDATE limit_gauge SET cur = cur - 1 WHERE scope = $1", s); err != nil {
			return err
		}
	}
	return nil
}

func (g gauge) peaks(t *testing.T) map[string]int {
	t.Helper()
	rows, err := g.b.pool.Query(context.Background(), "SELECT scope, peak FROM limit_gauge")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[s] = n
	}
	return out
}

// TestLimitsAcrossWorkers: two workers on separate pools, each allowed 20
// tasks at once, never run more than a limit's Max of a queue, of a task
// name, or of each key matching a pattern, in either mode; tasks outside
// every limit run beside them, and every task completes.
func TestLimitsAcrossWorkers(t *testing.T) {
	t.Parallel()
	for _, mode := range []worker.Mode{worker.ModeAdvisory, worker.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			g := newGauge(t, b)
			for _, l := range []queue.Limit{
				{Queue: "limited", Max: 3},
				{Name: "slow", Max: 2},
				{Key: "tenant:*", Max: 1},
			} {
				if err := b.client.SetLimit(ctx, l); err != nil {
					t.Fatal(err)
				}
			}
			var tasks []queue.NewTask
			for i := range 24 {
				tasks = append(tasks,
					queue.NewTask{Name: "job", Options: []queue.Option{queue.WithQueue("limited")}},
					queue.NewTask{Name: "slow"},
					queue.NewTask{Name: "tenant", Payload: "a", Options: []queue.Option{queue.WithLimitKey("tenant:a")}},
					queue.NewTask{Name: "tenant", Payload: "b", Options: []queue.Option{queue.WithLimitKey("tenant:b")}},
					queue.NewTask{Name: "free", Payload: i})
			}
			if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
				t.Fatal(err)
			}
			work := func(scopes func(*worker.Task) []string) worker.Handler {
				return func(ctx context.Context, task *worker.Task) error {
					s := scopes(task)
					if err := g.enter(ctx, s...); err != nil {
						return err
					}
					time.Sleep(20 * time.Millisecond) // the work
					return g.leave(ctx, s...)
				}
			}
			handlers := worker.Handlers{
				"job":  work(func(*worker.Task) []string { return []string{"queue limited"} }),
				"slow": work(func(*worker.Task) []string { return []string{"name slow"} }),
				"tenant": work(func(task *worker.Task) []string {
					return []string{"key tenant:" + string(task.Payload[1:len(task.Payload)-1]), "tenants"}
				}),
				"free": work(func(*worker.Task) []string { return []string{"free"} }),
			}
			cfg := worker.Config{Mode: mode, Concurrency: 20, Queues: []string{"default", "limited"}}
			var workers []*worker.Worker
			for range 2 {
				w, _ := start(t, pgtest.NewPool(t, b.schema), cfg, handlers)
				workers = append(workers, w)
			}
			pgtest.Eventually(t, 10*time.Second, "every task to complete", func() bool {
				return b.count(t, "status = 'completed'") == len(tasks)
			})
			peaks := g.peaks(t)
			t.Logf("peak concurrency per scope: %v", peaks)
			for scope, max := range map[string]int{"queue limited": 3, "name slow": 2, "key tenant:a": 1, "key tenant:b": 1} {
				if peaks[scope] > max {
					t.Errorf("%s: %d ran at once, limit %d", scope, peaks[scope], max)
				}
			}
			if peaks["free"] <= 3 {
				t.Errorf("unlimited tasks peaked at %d at once: limits held back tasks outside them", peaks["free"])
			}
			limits, err := b.client.Limits(ctx)
			if err != nil || len(limits) != 3 {
				t.Fatalf("Limits: %v, %v", limits, err)
			}
			// Name and key limits exist: the claim of queue limits, which
			// would not see them, must never have taken a task.
			for _, w := range workers {
				if byQueue, _, _ := worker.QueueClaimed(w); byQueue != 0 {
					t.Errorf("%d tasks taken by the claim of queue limits while name and key limits exist", byQueue)
				}
			}
		})
	}
}

// TestQueueLimitsOnly: while the only limits are queue limits, workers
// claim with the claim of queue limits, which holds a limited queue to its
// Max across four workers and leaves a queue without a limit alone.
func TestQueueLimitsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	g := newGauge(t, b)
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: "limited", Max: 2}); err != nil {
		t.Fatal(err)
	}
	var tasks []queue.NewTask
	for range 30 {
		tasks = append(tasks,
			queue.NewTask{Name: "job", Payload: "limited", Options: []queue.Option{queue.WithQueue("limited")}},
			queue.NewTask{Name: "job", Payload: "free", Options: []queue.Option{queue.WithQueue("free")}})
	}
	if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	handlers := worker.Handlers{"job": func(ctx context.Context, task *worker.Task) error {
		scope := string(task.Payload)
		if err := g.enter(ctx, scope); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
		return g.leave(ctx, scope)
	}}
	var workers []*worker.Worker
	for range 4 {
		w, _ := start(t, pgtest.NewPool(t, b.schema), worker.Config{Concurrency: 20, Queues: []string{"limited", "free"}}, handlers)
		workers = append(workers, w)
	}
	pgtest.Eventually(t, 20*time.Second, "every task to complete", func() bool {
		return b.count(t, "status = 'completed'") == len(tasks)
	})
	peaks := g.peaks(t)
	t.Logf("peak concurrency: %v", peaks)
	if peaks[`"limited"`] > 2 {
		t.Errorf("%d tasks of the limited queue ran at once, limit 2", peaks[`"limited"`])
	}
	if peaks[`"free"`] <= 2 {
		t.Errorf("the queue without a limit peaked at %d at once: held back by another queue's limit", peaks[`"free"`])
	}
	var byQueue, byAll int64
	for _, w := range workers {
		q, _, a := worker.QueueClaimed(w)
		byQueue, byAll = byQueue+q, byAll+a
	}
	if byQueue != int64(len(tasks)) || byAll != 0 {
		t.Errorf("%d tasks taken by the claims of queue limits and %d by the claim of every limit, want %d and 0", byQueue, byAll, len(tasks))
	}
}

// TestLimitPlacesHeldElsewhere: the places of a limit are its locks, not
// the count of running rows: while another session holds every place of a
// queue's limit (as a worker's claim does before it commits), no task of
// the queue starts, though no row runs; once they go, the tasks run. For a
// limit of 2 (one place a block) and of 600 (blocks of 2, 300 of them).
func TestLimitPlacesHeldElsewhere(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{2, 600} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			if err := b.client.SetLimit(ctx, queue.Limit{Queue: "limited", Max: limit}); err != nil {
				t.Fatal(err)
			}
			holder, err := b.pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Release()
			blocks := limit / max(1, limit/256)
			if _, err := holder.Exec(ctx, `
				SELECT pg_advisory_lock('skiplock_limits'::regclass::oid::integer, ((hashtext('queue:limited')::bigint + i)::bit(32))::integer)
				FROM generate_series(0, $1 - 1) AS i`, blocks); err != nil {
				t.Fatal(err)
			}
			for range 5 {
				b.enqueue(t, "job", nil, queue.WithQueue("limited"))
			}
			polls := &claims{}
			start(t, pgtest.NewPool(t, b.schema), worker.Config{Queues: []string{"limited"}, PollInterval: 50 * time.Millisecond, Observer: polls},
				worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }})
			waitClaims(t, 10, polls) // ten claims of the queue, none with a place
			if n := b.count(t, "status <> 'pending' OR attempt > 0"); n != 0 {
				t.Fatalf("%d tasks claimed while another session held every place of the limit", n)
			}
			if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
				t.Fatal(err)
			}
			pgtest.Eventually(t, 10*time.Second, "the tasks to run once the places are free", func() bool {
				return b.count(t, "status = 'completed'") == 5
			})
		})
	}
}

// TestLimitSlotsFreedWithSession: in advisory mode the slots of a worker
// whose session dies (as when its process is killed) go with it at once,
// and the queue's tasks, its own included, then run to completion on either
// worker, never more than the limit at a time.
func TestLimitSlotsFreedWithSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: "q", Max: 2}); err != nil {
		t.Fatal(err)
	}
	// A's first runs hang until its session is gone. A lost lock gives
	// the attempt back, so a task's second run is attempt 1 again.
	var hung sync.Map
	hang := worker.Handlers{"job": func(ctx context.Context, task *worker.Task) error {
		if _, again := hung.LoadOrStore(task.ID, true); !again {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}}
	cfg := worker.Config{Queues: []string{"q"}}
	a, _ := start(t, pgtest.NewPool(t, b.schema), cfg, hang)
	for range 3 {
		b.enqueue(t, "job", nil, queue.WithQueue("q"))
	}
	pgtest.Eventually(t, 5*time.Second, "A running two tasks", func() bool {
		return b.count(t, "status = 'running'") == 2
	})
	if n := b.limitLocks(t); n != 2 {
		t.Fatalf("%d slot locks held, want 2", n)
	}

	var ran atomic.Int32
	bw, _ := start(t, pgtest.NewPool(t, b.schema), cfg, worker.Handlers{"job": func(_ context.Context, task *worker.Task) error {
		ran.Add(1)
		return nil
	}})
	// B is up and claiming, and the limit holds it back.
	pgtest.Eventually(t, 5*time.Second, "B registered", func() bool { return b.lockPID(t, bw) != 0 })
	if n := b.count(t, "status = 'pending'"); n != 1 {
		t.Fatalf("%d pending, want 1: B ran past the limit", n)
	}

	pid := b.lockPID(t, a)
	b.terminateLockSession(t, a)
	pgtest.Eventually(t, time.Second, "A's slot locks gone with its session", func() bool {
		return b.limitLocksOf(t, pid) == 0
	})
	pgtest.Eventually(t, 5*time.Second, "all three tasks completed", func() bool {
		if n := b.limitLocks(t); n > 2 {
			t.Fatalf("%d slot locks held, limit 2", n)
		}
		return b.count(t, "status = 'completed'") == 3
	})
	t.Logf("B ran %d of the 3", ran.Load())
}

// TestLimitLocksBalance: with no limit set a claim takes no slot lock;
// with one set, each running limited task holds exactly one, the limit
// binds, and none is left once the tasks finish.
func TestLimitLocksBalance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var gate atomic.Pointer[chan struct{}]
	open := func() { c := make(chan struct{}); gate.Store(&c) }
	open()
	handlers := worker.Handlers{"job": func(ctx context.Context, _ *worker.Task) error {
		select {
		case <-*gate.Load():
		case <-ctx.Done():
		}
		return nil
	}}
	start(t, pgtest.NewPool(t, b.schema), worker.Config{Concurrency: 50}, handlers)
	for range 10 {
		b.enqueue(t, "job", nil)
	}
	pgtest.Eventually(t, 5*time.Second, "ten running", func() bool { return b.count(t, "status = 'running'") == 10 })
	if n := b.limitLocks(t); n != 0 {
		t.Fatalf("%d slot locks without any limit", n)
	}
	release := *gate.Load()
	open()
	close(release)
	pgtest.Eventually(t, 5*time.Second, "ten completed", func() bool { return b.count(t, "status = 'completed'") == 10 })

	if err := b.client.SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: 15}); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		b.enqueue(t, "job", nil)
	}
	pgtest.Eventually(t, 5*time.Second, "fifteen running", func() bool { return b.count(t, "status = 'running'") == 15 })
	if n := b.limitLocks(t); n != 15 {
		t.Fatalf("%d slot locks, want 15", n)
	}
	close(*gate.Load())
	pgtest.Eventually(t, 5*time.Second, "all completed and every slot released", func() bool {
		if n := b.count(t, "status = 'running'"); n > 15 {
			t.Fatalf("%d running, limit 15", n)
		}
		return b.count(t, "status = 'completed'") == 30 && b.limitLocks(t) == 0
	})
}

// TestLimitBlocks: a limit of 512 or more takes its places a block at a
// time. A binding limit of 600 (blocks of 2) between two workers that
// could run 800: never more than 600 run, at least 598 do while work
// waits (a worker may hold one place of a block it has no task for), in
// at most 300 locks; and every block is released once the tasks finish.
func TestLimitBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: 600}); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	handlers := worker.Handlers{"job": func(ctx context.Context, _ *worker.Task) error {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	}}
	tasks := make([]queue.NewTask, 1000)
	for i := range tasks {
		tasks[i] = queue.NewTask{Name: "job"}
	}
	if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		start(t, pgtest.NewPool(t, b.schema), worker.Config{Concurrency: 400, PollInterval: 100 * time.Millisecond}, handlers)
	}
	pgtest.Eventually(t, 20*time.Second, "598 or more running", func() bool {
		n := b.count(t, "status = 'running'")
		if n > 600 {
			t.Fatalf("%d running, limit 600", n)
		}
		return n >= 598
	})
	for range 10 {
		if n := b.count(t, "status = 'running'"); n > 600 {
			t.Fatalf("%d running, limit 600", n)
		}
		if n := b.limitLocks(t); n > 300 {
			t.Fatalf("%d limit locks held: a limit of 600 has 300 blocks", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(gate)
	pgtest.Eventually(t, 20*time.Second, "all completed and every block released", func() bool {
		if n := b.count(t, "status = 'running'"); n > 600 {
			t.Fatalf("%d running, limit 600", n)
		}
		return b.count(t, "status = 'completed'") == len(tasks) && b.limitLocks(t) == 0
	})
}

// TestLimitNeverBinding: under a queue limit far above what the worker
// runs, every task is claimed by the claims of queue limits, most within
// a block held across claims (TaskClaimHeld, no lock tried but the
// tasks'); a running worker holds at most two limit locks, and none is
// left once the tasks finish.
func TestLimitNeverBinding(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	var done atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	g := make(chan struct{})
	gate.Store(&g)
	handlers := worker.Handlers{"job": func(ctx context.Context, _ *worker.Task) error {
		select {
		case <-*gate.Load():
		case <-ctx.Done():
		}
		done.Add(1)
		return nil
	}}
	tasks := make([]queue.NewTask, 3000)
	for i := range tasks {
		tasks[i] = queue.NewTask{Name: "job"}
	}
	if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	w, _ := start(t, pgtest.NewPool(t, b.schema), worker.Config{Concurrency: 500, ClaimBatch: 100}, handlers)
	pgtest.Eventually(t, 10*time.Second, "500 running", func() bool { return b.count(t, "status = 'running'") == 500 })
	if n := b.limitLocks(t); n < 1 || n > 2 {
		t.Fatalf("%d limit locks held for 500 running tasks under a limit of 1,000,000 (blocks of 3,906)", n)
	}
	close(g)
	pgtest.Eventually(t, 20*time.Second, "all completed and every block released", func() bool {
		return b.count(t, "status = 'completed'") == len(tasks) && b.limitLocks(t) == 0
	})
	byQueue, held, byAll := worker.QueueClaimed(w)
	t.Logf("%d of %d tasks taken within a held block", held, len(tasks))
	if byQueue != int64(len(tasks)) || byAll != 0 {
		t.Errorf("%d tasks taken by the claims of queue limits and %d by the claim of every limit, want %d and 0", byQueue, byAll, len(tasks))
	}
	if held < int64(len(tasks))/2 {
		t.Errorf("%d of %d tasks taken within a held block: the never-binding limit paid for places claim by claim", held, len(tasks))
	}
}

// limitLocksOf counts the limit slot locks a backend holds.
func (b *bundle) limitLocksOf(t *testing.T, pid int32) int {
	t.Helper()
	var n int
	err := b.pool.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 2 AND pid = $1
		  AND classid = 'skiplock_limits'::regclass::oid`, pid).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// limitLocks counts the limit slot locks held on the server for this
// schema.
func (b *bundle) limitLocks(t *testing.T) int {
	t.Helper()
	var n int
	err := b.pool.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 2 AND granted
		  AND classid = 'skiplock_limits'::regclass::oid
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLimitSetWhileWorking: workers that have been claiming with no limit
// in the schema (the plain claim) honour a limit the moment it is set, in
// either mode: the plain claim takes nothing once a limit exists, and the
// workers switch to the claim that enforces it instead of idling.
func TestLimitSetWhileWorking(t *testing.T) {
	t.Parallel()
	for _, mode := range []worker.Mode{worker.ModeAdvisory, worker.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			g := newGauge(t, b)
			handlers := worker.Handlers{
				"free": func(context.Context, *worker.Task) error { return nil },
				"slow": func(ctx context.Context, task *worker.Task) error {
					if err := g.enter(ctx, "name slow"); err != nil {
						return err
					}
					time.Sleep(20 * time.Millisecond) // the work
					return g.leave(ctx, "name slow")
				},
			}
			cfg := worker.Config{Mode: mode, Concurrency: 20}
			for range 2 {
				start(t, pgtest.NewPool(t, b.schema), cfg, handlers)
			}
			var free []queue.NewTask
			for i := range 50 {
				free = append(free, queue.NewTask{Name: "free", Payload: i})
			}
			if _, err := b.client.EnqueueMany(ctx, free); err != nil {
				t.Fatal(err)
			}
			pgtest.Eventually(t, 10*time.Second, "the unlimited tasks to complete", func() bool {
				return b.count(t, "status = 'completed'") == len(free)
			})
			if err := b.client.SetLimit(ctx, queue.Limit{Name: "slow", Max: 2}); err != nil {
				t.Fatal(err)
			}
			var slow []queue.NewTask
			for i := range 30 {
				slow = append(slow, queue.NewTask{Name: "slow", Payload: i})
			}
			if _, err := b.client.EnqueueMany(ctx, slow); err != nil {
				t.Fatal(err)
			}
			pgtest.Eventually(t, 10*time.Second, "the limited tasks to complete", func() bool {
				return b.count(t, "status = 'completed'") == len(free)+len(slow)
			})
			if peak := g.peaks(t)["name slow"]; peak > 2 || peak == 0 {
				t.Errorf("%d slow tasks ran at once, limit 2", peak)
			}
		})
	}
}

// TestClaimsWhilePoolIsBusy: handlers may hold every connection of the
// worker's pool, and claims go on (in advisory mode on the lock session):
// the look for concurrency limits, which needs a pool connection, gives up
// quickly and keeps its last answer rather than hold up the claim. Empty
// polls (every 50 ms here) look afresh each time, so a look that waited for
// a connection would stall every claim for as long as it waited: this test
// asserts progress while the pool is held, and a wait past 5 s shows in
// its log (with a 30 s look it took 61 s).
func TestClaimsWhilePoolIsBusy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := pgtest.Config(t, b.schema)
	cfg.MaxConns = 2
	pool := pgtest.PoolFromConfig(t, cfg)
	release := make(chan struct{})
	holding := make(chan struct{}, 2)
	var quick atomic.Int64
	handlers := worker.Handlers{
		"hold": func(ctx context.Context, task *worker.Task) error {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer c.Release()
			holding <- struct{}{}
			<-release
			return nil
		},
		"quick": func(context.Context, *worker.Task) error { quick.Add(1); return nil },
	}
	start(t, pool, worker.Config{}, handlers)
	b.enqueue(t, "hold", 1)
	b.enqueue(t, "hold", 2)
	for range 2 {
		select {
		case <-holding:
		case <-time.After(pgtest.Patient(10 * time.Second)):
			t.Fatal("the two holding handlers did not start")
		}
	}
	for i := range 10 {
		b.enqueue(t, "quick", i)
	}
	pgtest.Eventually(t, 5*time.Second, "the quick tasks to start while the pool is held", func() bool {
		return quick.Load() == 10
	})
	close(release)
	pgtest.Eventually(t, 10*time.Second, "every task to complete", func() bool {
		return b.count(t, "status = 'completed'") == 12
	})
}

// TestFreedPlacesWakeClaims: with the poll slowed to 20 s, a task that ends
// wakes the claim loops waiting for its place, in this worker and in the
// others: a concurrency limit's slot, an exclusive key, and a limit spanning
// two workers of different queues, where only the other worker has tasks
// left. Before, each freed place waited for the poll: the ten exclusive
// tasks alone would take over three minutes, past the wait below. The
// poll stays the fallback for a notification lost on a loaded machine.
func TestFreedPlacesWakeClaims(t *testing.T) {
	t.Parallel()
	for _, mode := range []worker.Mode{worker.ModeAdvisory, worker.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			for _, l := range []queue.Limit{{Queue: "limited", Max: 2}, {Name: "shared", Max: 1}} {
				if err := b.client.SetLimit(ctx, l); err != nil {
					t.Fatal(err)
				}
			}
			var tasks []queue.NewTask
			for range 10 {
				tasks = append(tasks,
					queue.NewTask{Name: "job", Options: []queue.Option{queue.WithQueue("limited")}},
					queue.NewTask{Name: "job", Options: []queue.Option{queue.WithQueue("one"), queue.WithExclusiveKey("k")}})
			}
			for range 3 {
				tasks = append(tasks,
					queue.NewTask{Name: "shared", Options: []queue.Option{queue.WithQueue("a")}},
					queue.NewTask{Name: "shared", Options: []queue.Option{queue.WithQueue("b")}})
			}
			if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
				t.Fatal(err)
			}
			var shared atOnce
			work := func(ctx context.Context, task *worker.Task) error {
				if task.Name == "shared" {
					defer shared.enter()()
				}
				time.Sleep(5 * time.Millisecond)
				return nil
			}
			handlers := worker.Handlers{"job": work, "shared": work}
			cfg := worker.Config{Mode: mode, Concurrency: 10, PollInterval: 20 * time.Second}
			cfg.Queues = []string{"limited", "one", "a"}
			start(t, pgtest.NewPool(t, b.schema), cfg, handlers)
			cfg.Queues = []string{"b"}
			start(t, pgtest.NewPool(t, b.schema), cfg, handlers)
			pgtest.Eventually(t, 5*time.Second, "every task to complete without a poll", func() bool {
				return b.count(t, "status = 'completed'") == len(tasks)
			})
			if mode == worker.ModeAdvisory {
				pgtest.Eventually(t, 5*time.Second, "every place released", func() bool { return b.limitLocks(t) == 0 })
			}
			if p := shared.peak.Load(); p > 1 {
				t.Errorf("%d tasks of a limit of 1 ran at once", p)
			}
		})
	}
}

// TestExclusiveKeyHandedAcross: an exclusive key is announced once freed
// unless the claim of the worker that freed it took the key again, and only
// that claim: here each task of the key alternates between two names, each
// handled by one of two workers, so the next task of the key is always the
// other worker's, which must hear of it (the poll is an hour away).
func TestExclusiveKeyHandedAcross(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var tasks []queue.NewTask
	for i := range 10 {
		tasks = append(tasks, queue.NewTask{Name: []string{"left", "right"}[i%2], Options: []queue.Option{queue.WithExclusiveKey("k")}})
	}
	if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	var key atOnce
	work := func(context.Context, *worker.Task) error {
		defer key.enter()()
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	cfg := worker.Config{PollInterval: time.Hour}
	start(t, pgtest.NewPool(t, b.schema), cfg, worker.Handlers{"left": work})
	start(t, pgtest.NewPool(t, b.schema), cfg, worker.Handlers{"right": work})
	pgtest.Eventually(t, 5*time.Second, "every task to complete without a poll", func() bool {
		return b.count(t, "status = 'completed'") == len(tasks)
	})
	if p := key.peak.Load(); p > 1 {
		t.Errorf("%d tasks of one exclusive key ran at once", p)
	}
}

// TestClaimCarriesUnlocksWhenTakingNothing: a claim carries the unlocks of
// finished tasks, and runs them even when it picks nothing at all: its
// queue's limit full (no room to pick), or no held block with room. Left
// undone, the worker would believe a limit's place released that its
// session still held, and the place would be lost to every other worker.
// Each claim statement of advisory mode, on one connection: a slot lock
// taken as a finished task's would be, then a claim that must release it.
func TestClaimCarriesUnlocksWhenTakingNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: "full", Max: 1}); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, "job", nil, queue.WithQueue("full"))
	b.enqueue(t, "job", nil, queue.WithQueue("full"))
	// One task runs: the limit of 1 is full by the running rows.
	if _, err := b.pool.Exec(ctx, "UPDATE skiplock_tasks SET status = 'running', attempt = 1, started_at = now(), worker_id = 'gone' WHERE id = (SELECT min(id) FROM skiplock_tasks)"); err != nil {
		t.Fatal(err)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var lockClass, limitClass int32
	if err := conn.QueryRow(ctx, "SELECT 'skiplock_tasks'::regclass::oid::integer, 'skiplock_limits'::regclass::oid::integer").Scan(&lockClass, &limitClass); err != nil {
		t.Fatal(err)
	}
	const key = 12345
	held := func() bool {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
			AND classid = $1::integer::oid AND objid = $2::integer::oid AND objsubid = 2`, limitClass, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	q := db.New()
	p := db.TaskClaimParams{
		WorkerID: "w", LockClass: lockClass, LimitClass: limitClass, UnlockIds: []int64{}, UnlockLimitLocks: []int32{key},
		Queue: "full", CheckFull: true, OnlyNames: []string{}, SkipNames: []string{}, OnlyIds: []int64{}, Max: 10,
		HeldLimitLocks: []int32{}, HeldLimitCounts: []int32{},
	}
	for _, c := range []struct {
		name  string
		claim func() (int, error)
	}{
		{"TaskClaim", func() (int, error) { r, err := q.TaskClaim(ctx, conn, p); return len(r), err }},
		{"TaskClaimQueue", func() (int, error) {
			r, err := q.TaskClaimQueue(ctx, conn, db.TaskClaimQueueParams{
				WorkerID: p.WorkerID, LockClass: p.LockClass, UnlockIds: p.UnlockIds, LimitClass: p.LimitClass,
				UnlockLimitLocks: p.UnlockLimitLocks, Queue: p.Queue, CheckFull: true, OnlyNames: p.OnlyNames,
				SkipNames: p.SkipNames, Max: p.Max, HeldLimitLocks: p.HeldLimitLocks, HeldLimitCounts: p.HeldLimitCounts,
			})
			return len(r), err
		}},
		{"TaskClaimHeld", func() (int, error) {
			r, err := q.TaskClaimHeld(ctx, conn, db.TaskClaimHeldParams{
				WorkerID: p.WorkerID, LockClass: p.LockClass, UnlockIds: p.UnlockIds, LimitClass: p.LimitClass,
				UnlockLimitLocks: p.UnlockLimitLocks, Queue: p.Queue, OnlyNames: p.OnlyNames,
				SkipNames: p.SkipNames, Max: p.Max, HeldLimitLocks: p.HeldLimitLocks, HeldLimitCounts: p.HeldLimitCounts,
			})
			return len(r), err
		}},
	} {
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", limitClass, key); err != nil {
			t.Fatal(err)
		}
		n, err := c.claim()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n != 0 {
			t.Fatalf("%s took %d tasks of a full queue", c.name, n)
		}
		if held() {
			t.Errorf("%s took nothing and left the lock it was to release held", c.name)
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
				t.Fatal(err)
			}
		}
	}
}
