package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// running counts the handlers running at once, per shard and in all, and
// the most there were.
type running struct {
	mu                sync.Mutex
	now, peak, done   map[int]int
	total, totalPeak  int
	firstDone         map[int]int // done per shard when the first shard had done all its tasks
	backlog           int         // tasks per shard, for firstDone
	reached           chan struct{}
	reachShard, reach int // reached closes once shard reachShard runs reach at once
	reachOnce         sync.Once
	atReach           map[int]int // done per shard then
}

func newRunning(reachShard, reach int) *running {
	return &running{now: map[int]int{}, peak: map[int]int{}, done: map[int]int{}, reached: make(chan struct{}),
		reachShard: reachShard, reach: reach}
}

func (r *running) enter(shard int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now[shard]++
	r.peak[shard] = max(r.peak[shard], r.now[shard])
	r.total++
	r.totalPeak = max(r.totalPeak, r.total)
	if shard == r.reachShard && r.now[shard] >= r.reach {
		r.reachOnce.Do(func() {
			r.atReach = map[int]int{}
			for n, d := range r.done {
				r.atReach[n] = d
			}
			close(r.reached)
		})
	}
}

func (r *running) leave(shard int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now[shard]--
	r.total--
	r.done[shard]++
	if r.backlog > 0 && r.done[shard] == r.backlog && r.firstDone == nil {
		r.firstDone = map[int]int{}
		for n, d := range r.done {
			r.firstDone[n] = d
		}
	}
}

// open lets every handler waiting on reached through, whether or not it
// was: after wait, so that a worker that never gets there fails the test
// rather than hangs it.
func (r *running) openAfter(wait time.Duration) {
	time.AfterFunc(wait, func() { r.reachOnce.Do(func() { close(r.reached) }) })
}

func (r *running) peaks() (map[int]int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := map[int]int{}
	for n, v := range r.peak {
		p[n] = v
	}
	return p, r.totalPeak
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// enqueueOn enqueues n tasks of name on one shard's database.
func enqueueOn(t *testing.T, pool *pgxpool.Pool, name string, n int) {
	t.Helper()
	c := queue.New(pool)
	for i := range n {
		if _, err := c.Enqueue(context.Background(), name, i); err != nil {
			t.Fatal(err)
		}
	}
}

// pendingOn counts the tasks of a shard's database not yet completed.
func pendingOn(pool *pgxpool.Pool) int {
	var left int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM skiplock_tasks WHERE status <> 'completed'`).Scan(&left); err != nil {
		return -1
	}
	return left
}

// TestShardedWorkerLendsIdleSlots: with a backlog on one shard of three,
// that shard runs more than its third of Concurrency at once: all of it
// but the one slot each other shard keeps. The process never runs more
// than Concurrency.
func TestShardedWorkerLendsIdleSlots(t *testing.T) {
	t.Parallel()
	pools := map[int]*pgxpool.Pool{1: stampedPool(t, 1), 2: stampedPool(t, 2), 3: stampedPool(t, 3)}
	const concurrency, busy, tasks = 12, 2, 60
	enqueueOn(t, pools[busy], "hold", tasks)
	// Handlers hold their slot until the busy shard runs every slot it
	// may have (12 less one for each other shard).
	r := newRunning(busy, concurrency-2)
	r.openAfter(pgtest.Patient(10 * time.Second))
	s, err := worker.NewSharded(pools, worker.Config{Concurrency: concurrency, PollInterval: 50 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	stop := runSharded(t, s, worker.Handlers{"hold": func(ctx context.Context, task *worker.Task) error {
		n := queue.ShardOf(task.ID)
		r.enter(n)
		defer r.leave(n)
		select {
		case <-r.reached:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}})
	pgtest.Eventually(t, 10*time.Second, "the busy shard's backlog to complete", func() bool { return pendingOn(pools[busy]) == 0 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	peaks, total := r.peaks()
	if peaks[busy] != concurrency-2 {
		t.Fatalf("the one shard with work ran at most %d tasks at once, want %d: Concurrency %d less one slot for each idle shard (its even part is %d)",
			peaks[busy], concurrency-2, concurrency, concurrency/3)
	}
	if total > concurrency {
		t.Fatalf("%d handlers ran at once, Concurrency is %d", total, concurrency)
	}
}

// TestShardedWorkerTakesShareBack: a shard that gets work while another
// runs all the slots it could borrow takes its share back as the other's
// tasks end, while the other still has a backlog.
func TestShardedWorkerTakesShareBack(t *testing.T) {
	t.Parallel()
	pools := map[int]*pgxpool.Pool{1: stampedPool(t, 1), 2: stampedPool(t, 2)}
	const concurrency, backlog = 6, 150
	enqueueOn(t, pools[1], "busy", backlog)
	r := newRunning(2, concurrency/2)
	r.openAfter(pgtest.Patient(15 * time.Second))
	busyGate := make(chan struct{})
	s, err := worker.NewSharded(pools, worker.Config{Concurrency: concurrency, PollInterval: 50 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	stop := runSharded(t, s, worker.Handlers{
		"busy": func(ctx context.Context, task *worker.Task) error {
			r.enter(1)
			defer r.leave(1)
			select {
			case <-busyGate:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		},
		"quick": func(ctx context.Context, task *worker.Task) error {
			r.enter(2)
			defer r.leave(2)
			select {
			case <-r.reached:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		},
	})
	running := func(n int) int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.now[n]
	}
	pgtest.Eventually(t, 10*time.Second, "shard 1 to run all it can borrow", func() bool { return running(1) == concurrency-1 })
	enqueueOn(t, pools[2], "quick", 10)
	pgtest.Eventually(t, 10*time.Second, "shard 2 to run a task in its one slot", func() bool { return running(2) == 1 })
	close(busyGate)
	pgtest.Eventually(t, 20*time.Second, "both backlogs to complete", func() bool { return pendingOn(pools[1]) == 0 && pendingOn(pools[2]) == 0 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	peaks, total := r.peaks()
	r.mu.Lock()
	at := r.atReach
	r.mu.Unlock()
	t.Logf("peaks %v, in all %d; shard 1 had done %d of %d when shard 2 ran its share", peaks, total, at[1], backlog)
	if peaks[2] != concurrency/2 || at == nil {
		t.Fatalf("shard 2 ran at most %d at once, want its share of %d", peaks[2], concurrency/2)
	}
	if at[1] >= backlog {
		t.Fatalf("shard 2 had its share only once shard 1's backlog was done")
	}
	if total > concurrency {
		t.Fatalf("%d handlers ran at once, Concurrency is %d", total, concurrency)
	}
}

// TestShardedWorkerSharesWhenAllBusy: with a backlog on every shard, each
// runs its share and progresses: when the first shard is done, each other
// has done a good part of its backlog. The process never runs more than
// Concurrency.
func TestShardedWorkerSharesWhenAllBusy(t *testing.T) {
	t.Parallel()
	pools := map[int]*pgxpool.Pool{1: stampedPool(t, 1), 2: stampedPool(t, 2), 3: stampedPool(t, 3)}
	const concurrency, tasks = 6, 40
	r := newRunning(0, 0)
	r.backlog = tasks
	s, err := worker.NewSharded(pools, worker.Config{Concurrency: concurrency, PollInterval: 50 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	stop := runSharded(t, s, worker.Handlers{"work": func(ctx context.Context, task *worker.Task) error {
		n := queue.ShardOf(task.ID)
		r.enter(n)
		defer r.leave(n)
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}})
	// The backlogs arrive once every shard's worker is up: a shard whose
	// lock session came up late on a loaded machine (hundreds of
	// milliseconds) found another shard's backlog done before it started,
	// which says nothing about how the shards share.
	for n, pool := range pools {
		pgtest.Eventually(t, 30*time.Second, fmt.Sprintf("shard %d's worker to register its lock session", n), func() bool {
			var up int
			err := pool.QueryRow(context.Background(), `SELECT count(*) FROM skiplock_workers WHERE lock_backend_pid IS NOT NULL`).Scan(&up)
			return err == nil && up > 0
		})
	}
	for _, pool := range pools {
		batch := make([]queue.NewTask, tasks)
		for i := range batch {
			batch[i] = queue.NewTask{Name: "work", Payload: i}
		}
		if _, err := queue.New(pool).EnqueueMany(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.Eventually(t, 10*time.Second, "every shard's backlog to complete", func() bool {
		for _, pool := range pools {
			if pendingOn(pool) != 0 {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	peaks, total := r.peaks()
	r.mu.Lock()
	first := r.firstDone
	r.mu.Unlock()
	t.Logf("peaks per shard %v, in all %d; done per shard when the first was done: %v", peaks, total, first)
	if total > concurrency {
		t.Fatalf("%d handlers ran at once, Concurrency is %d", total, concurrency)
	}
	for n := range pools {
		if first[n] < tasks/4 {
			t.Fatalf("shard %d had done %d of its %d tasks when another had done all of its own: starved (%v)", n, first[n], tasks, first)
		}
		if peaks[n] < concurrency/len(pools) {
			t.Fatalf("shard %d ran at most %d at once, below its share of %d", n, peaks[n], concurrency/len(pools))
		}
	}
}

// TestShardedWorkerLendsPastShardDown: a shard whose server refuses
// connections is waited for, and the slots it would have used go to the
// shard that has work: that shard runs all of Concurrency but the down
// shard's one slot.
func TestShardedWorkerLendsPastShardDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	up := stampedPool(t, 1)
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	down, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	const concurrency, tasks = 4, 30
	enqueueOn(t, up, "hold", tasks)
	r := newRunning(1, concurrency-1)
	r.openAfter(pgtest.Patient(10 * time.Second))
	s, err := worker.NewSharded(map[int]*pgxpool.Pool{1: up, 2: down}, worker.Config{Concurrency: concurrency, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, worker.Handlers{"hold": func(ctx context.Context, task *worker.Task) error {
			r.enter(1)
			defer r.leave(1)
			select {
			case <-r.reached:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}})
	}()
	pgtest.Eventually(t, 10*time.Second, "shard 1's tasks to complete while shard 2 is down", func() bool { return pendingOn(up) == 0 })
	select {
	case err := <-done:
		t.Fatalf("Run returned while shard 2 was down: %v", err)
	default:
	}
	stopCtx, cancel := context.WithTimeout(ctx, pgtest.Patient(5*time.Second))
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if peaks, _ := r.peaks(); peaks[1] != concurrency-1 {
		t.Fatalf("the shard that is up ran at most %d at once, want %d (Concurrency %d less the down shard's one slot)", peaks[1], concurrency-1, concurrency)
	}
}

// TestShardedWorkerLeaseMode: in lease mode over two shards every task
// completes once, and each shard's rescuer returns the task of a worker
// that died holding its lease, which then runs.
func TestShardedWorkerLeaseMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := map[int]*pgxpool.Pool{1: stampedPool(t, 1), 2: stampedPool(t, 2)}
	const tasks = 50
	dead := map[int]int64{}
	for n, pool := range pools {
		enqueueOn(t, pool, "count", tasks)
		// A task claimed by a worker that died: its lease ran out, and
		// the worker is not heard from.
		id := pgtest.InsertTask(t, pool, queue.DefaultQueue, "count", "running", 1, 25, "[]")
		if _, err := pool.Exec(ctx, `UPDATE skiplock_tasks SET worker_id = 'gone', locked_until = now() - interval '1 second' WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		dead[n] = id
	}
	var runs runCounter
	var leased sync.Map // shard -> true: a running task of that shard held a lease
	s, err := worker.NewSharded(pools, worker.Config{Mode: worker.ModeLease, LeaseDuration: time.Second, Concurrency: 4,
		PollInterval: 50 * time.Millisecond, RescueInterval: 100 * time.Millisecond, HealthInterval: 100 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	stop := runSharded(t, s, worker.Handlers{"count": func(ctx context.Context, task *worker.Task) error {
		runs.ran(task.ID)
		n := queue.ShardOf(task.ID)
		var lease bool
		err := pools[n].QueryRow(ctx, `SELECT locked_until > now() FROM skiplock_tasks WHERE id = $1`, task.ID).Scan(&lease)
		if err == nil && lease {
			leased.Store(n, true)
		}
		return nil
	}})
	pgtest.Eventually(t, 15*time.Second, "every task of both shards to complete, the dead worker's too", func() bool {
		for _, pool := range pools {
			if pendingOn(pool) != 0 {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ids := map[string]bool{}
	for n, pool := range pools {
		if _, ok := leased.Load(n); !ok {
			t.Fatalf("no running task of shard %d held a lease", n)
		}
		rows, err := pool.Query(ctx, `SELECT id, worker_id, errors::text FROM skiplock_tasks`)
		if err != nil {
			t.Fatal(err)
		}
		count := 0
		for rows.Next() {
			var id int64
			var workerID, errs string
			if err := rows.Scan(&id, &workerID, &errs); err != nil {
				t.Fatal(err)
			}
			count++
			if queue.ShardOf(id) != n {
				t.Fatalf("task %d on shard %d's database", id, n)
			}
			if c := runs.count(id); c != 1 {
				t.Fatalf("task %d of shard %d ran %d times", id, n, c)
			}
			ids[workerID] = true
			if id == dead[n] && !containsRescued(errs) {
				t.Fatalf("the dead worker's task %d on shard %d has errors %s, want a rescue", id, n, errs)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if count != tasks+1 {
			t.Fatalf("shard %d has %d tasks, want %d", n, count, tasks+1)
		}
	}
	if len(ids) != 1 || ids["gone"] {
		t.Fatalf("tasks completed by workers %v, want the sharded worker's one ID", ids)
	}
}

func containsRescued(errs string) bool {
	var e []struct {
		Outcome string `json:"outcome"`
	}
	if err := json.Unmarshal([]byte(errs), &e); err != nil {
		return false
	}
	for _, x := range e {
		if x.Outcome == "rescued" {
			return true
		}
	}
	return false
}
