// Package shardchaos breaks a sharded queue on purpose and checks that no
// task is lost.
//
// Three throwaway PostgreSQL clusters are shards 1, 2 and 3, each migrated
// and stamped (migrations.SetShard). Producers enqueue continuously through
// a queue.ShardedClient: tasks without a key (kept at a backlog on every
// shard, so that the workers are always busy), tasks in sequences, and
// tasks with unique keys. Worker processes (this test binary, re-executed
// in worker mode), each a worker.ShardedWorker over the three shards, run
// them; every handler records its run in a ledger table on its task's
// shard. Meanwhile the test SIGKILLs a worker process and starts another,
// then crashes one shard's server (pg_ctl stop -m immediate) and starts it
// again a few seconds later.
//
// At the end: every acknowledged enqueue completed; a task ran again only
// after its worker was killed, its shard crashed or its worker lost its lock
// session, and never while an earlier run of it went on; each completion is
// that of the task's last claim; a sequence's tasks ran one after another in
// the order they were enqueued; the tasks of a unique key are all on its
// shard, and no two were pending or running there at once; no advisory lock
// is left. It asserts outcomes only. It reports, without asserting, the
// completion rate of the shards that stayed up in the seconds before the
// crash and during the outage.
//
// The long form crashes each shard in turn, for 10 s each, and kills a
// worker before and during each outage:
//
//	go test -run TestShardChaos -v -timeout 30m ./internal/systemtest/shardchaos -shardchaos.long
package shardchaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/childproc"
	"github.com/skiplock/skiplock/internal/testinfra/devpg"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

var long = flag.Bool("shardchaos.long", false, "crash every shard in turn, for 10 s each")

const (
	envWorker = "SKIPLOCK_SHARDCHAOS_WORKER" // worker mode: the worker's ID
	envURLs   = "SKIPLOCK_SHARDCHAOS_URLS"   // "n=url n=url ..."
)

// lossMark starts the line a worker prints when it notices the loss of a
// lock session, followed by the time in Unix nanoseconds.
const lossMark = "shardchaos: lock session lost at "

// workerConcurrency is each worker process's Config.Concurrency: two
// tasks at a time on each of the three shards.
const workerConcurrency = 6

func TestMain(m *testing.M) {
	if id := os.Getenv(envWorker); id != "" {
		if err := workerMain(id, os.Getenv(envURLs)); err != nil {
			fmt.Fprintln(os.Stderr, "shardchaos worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// payload is every task's: how long its handler works.
type payload struct {
	WorkMs int `json:"work_ms"`
}

// workerMain is one worker process: a ShardedWorker over every shard,
// whose handler records each run in the ledger of the task's shard.
func workerMain(id, urls string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pools := map[int]*pgxpool.Pool{}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for _, f := range strings.Fields(urls) {
		n, url, _ := strings.Cut(f, "=")
		shard, err := strconv.Atoi(n)
		if err != nil {
			return fmt.Errorf("%s: %q: %w", envURLs, f, err)
		}
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return err
		}
		cfg.MaxConns = 8 // the worker's own use, and its handlers' ledger writes
		if pools[shard], err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return err
		}
	}
	run := func(ctx context.Context, t *worker.Task) error {
		var p payload
		if err := t.Decode(&p); err != nil {
			return err
		}
		pool := pools[queue.ShardOf(t.ID)]
		var run int64
		err := pool.QueryRow(ctx, `INSERT INTO shardchaos_runs (task_id, attempt, worker_id, claimed_at, started_at)
			VALUES ($1, $2, $3, $4, $5) RETURNING id`, t.ID, t.Attempt, id, t.StartedAt, time.Now()).Scan(&run)
		if err != nil {
			return err
		}
		select {
		case <-time.After(time.Duration(p.WorkMs) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err = pool.Exec(ctx, "UPDATE shardchaos_runs SET finished_at = $2 WHERE id = $1", run, time.Now())
		return err
	}
	sw, err := worker.NewSharded(pools, worker.Config{
		WorkerID:     id,
		Concurrency:  workerConcurrency,
		RetryBackoff: func(int) time.Duration { return 100 * time.Millisecond },
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Observer:     lossPrinter{},
		// SIGKILLs pick workers, not tasks: a task caught in three would be
		// quarantined as poison (worker's TestPoisonTaskQuarantined tests
		// that); here every such task is innocent.
		MaxCrashes: 1000,
	})
	if err != nil {
		return err
	}
	return sw.Run(ctx, worker.Handlers{"plain": run, "seq": run, "uniq": run})
}

// lossPrinter prints each loss of a lock session that the worker noticed
// itself (it has one per shard): such a loss explains a run whose outcome
// was not written as surely as a kill does.
type lossPrinter struct{ worker.NopObserver }

func (lossPrinter) LockSessionLost(int) {
	fmt.Fprintf(os.Stderr, "%s%d\n", lossMark, time.Now().UnixNano())
}

// createLedger is every shard's ledger: one row per handler run, with the
// claim it ran under.
const createLedger = `CREATE TABLE shardchaos_runs (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	task_id bigint NOT NULL, attempt int NOT NULL, worker_id text NOT NULL,
	claimed_at timestamptz NOT NULL, started_at timestamptz NOT NULL, finished_at timestamptz)`

// event is a disruption: of one worker (a kill) or of one shard (a crash,
// from the stop to the end of the start). at is taken just before it and
// after just after it.
type event struct {
	at, after time.Time
	kind      string // kill, crash
	worker    string // kill
	shard     int    // crash
}

// setting is a form of the test.
type setting struct {
	workers int
	crashes []int         // the shards crashed, in turn
	outage  time.Duration // how long a crashed shard stays down; also the "before" window
	killIn  bool          // also kill a worker during each outage
	after   time.Duration // producers go on after each restart
}

func TestShardChaos(t *testing.T) {
	s := setting{workers: 3, crashes: []int{2}, outage: 4 * time.Second, after: 2 * time.Second}
	if *long {
		s = setting{workers: 4, crashes: []int{2, 3, 1}, outage: 10 * time.Second, killIn: true, after: 5 * time.Second}
	}
	ctx := context.Background()
	began := time.Now()

	// Three clusters of our own, since the test crashes them.
	servers := map[int]*devpg.Server{}
	pools := map[int]*pgxpool.Pool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var bootErr error
	for n := 1; n <= 3; n++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv, pool, err := bootShard(ctx, n)
			mu.Lock()
			defer mu.Unlock()
			if srv != nil {
				servers[n] = srv
				t.Cleanup(func() { srv.Close() })
			}
			if pool != nil {
				pools[n] = pool
				t.Cleanup(pool.Close)
			}
			bootErr = errors.Join(bootErr, err)
		}()
	}
	wg.Wait()
	if bootErr != nil {
		t.Fatal(bootErr)
	}
	sc, err := queue.NewSharded(pools)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("three shards booted and migrated in %s", time.Since(began).Round(time.Millisecond))

	// Worker processes, restarted when they exit by themselves.
	var urls []string
	for n := 1; n <= 3; n++ {
		urls = append(urls, fmt.Sprintf("%d=%s", n, servers[n].URL))
	}
	procs := map[int]*childproc.Proc{}
	outputs := map[string]*childproc.Buffer{} // every worker's, killed ones too
	generation := 0
	spawn := func(slot int) {
		generation++
		id := fmt.Sprintf("shardchaos-w%d-%d", slot, generation)
		procs[slot] = childproc.Start(t, id, exec.Command(os.Args[0], "-test.run=^$"),
			envWorker+"="+id, envURLs+"="+strings.Join(urls, " "))
		outputs[id] = procs[slot].Out
	}
	for slot := range s.workers {
		spawn(slot)
	}
	defer func() {
		for _, p := range procs {
			p.Kill()
		}
	}()
	var events []event
	kill := func(slot int) {
		p := procs[slot]
		at := time.Now()
		p.Kill()
		events = append(events, event{at: at, after: time.Now(), kind: "kill", worker: p.ID})
		spawn(slot)
	}
	respawn := func() {
		for slot, p := range procs {
			if p.Exited() {
				t.Logf("worker %s exited by itself (%v); restarting it: %s", p.ID, p.Err(), firstLine(p.Out.String()))
				spawn(slot)
			}
		}
	}

	// Producers.
	prod := startProducers(t, ctx, sc, pools)
	defer prod.stop()

	// Warm up: every shard completes tasks.
	pgtest.Eventually(t, 5*time.Second, "every shard completing tasks", func() bool {
		respawn()
		for _, pool := range pools {
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE status = 'completed'").Scan(&n); err != nil || n == 0 {
				return false
			}
		}
		return true
	})

	type window struct {
		shard                     int
		beforeFrom, crashAt, upAt time.Time
		downFrom, downTo          time.Time
	}
	var windows []window
	for _, down := range s.crashes {
		// A SIGKILLed worker, and its successor working before the window
		// before the crash begins.
		slot := rand.IntN(s.workers)
		kill(slot)
		successor := procs[slot].ID
		pgtest.Eventually(t, 5*time.Second, "the restarted worker completing a task", func() bool {
			respawn()
			return finishedBy(ctx, pools, procs[slot].ID) > 0 || procs[slot].ID != successor
		})
		w := window{shard: down, beforeFrom: time.Now()}
		sleepRespawning(s.outage, respawn)

		// The crash: stop -m immediate, a few seconds down, start.
		w.crashAt = time.Now()
		if err := servers[down].Stop(ctx); err != nil {
			t.Fatal(err)
		}
		w.downFrom = time.Now()
		if s.killIn {
			sleepRespawning(s.outage/2, respawn)
			kill(rand.IntN(s.workers))
			sleepRespawning(s.outage-s.outage/2, respawn)
		} else {
			sleepRespawning(s.outage, respawn)
		}
		w.downTo = time.Now()
		if err := servers[down].Start(ctx); err != nil {
			t.Fatal(err)
		}
		w.upAt = time.Now()
		events = append(events, event{at: w.crashAt, after: w.upAt, kind: "crash", shard: down})
		windows = append(windows, w)
		t.Logf("shard %d crashed at %s and answered again after %s", down,
			w.crashAt.Sub(began).Round(time.Millisecond), w.upAt.Sub(w.crashAt).Round(time.Millisecond))
		sleepRespawning(s.after, respawn)
	}
	prod.stop()

	// Drain: every task of every shard completes.
	drainFrom := time.Now()
	deadline := drainFrom.Add(pgtest.Patient(10 * time.Second))
	for slow := false; ; {
		respawn()
		left, ended, err := notCompleted(ctx, pools)
		if err == nil && left == 0 {
			break
		}
		if ended > 0 {
			t.Fatalf("%d tasks failed or were cancelled (lost: no handler fails for good); the state:\n%s", ended, report(ctx, pools, procs))
		}
		if !slow && time.Since(drainFrom) > 10*time.Second {
			slow = true
			t.Logf("%d tasks not completed 10 s after the producers stopped (%v); the state:\n%s", left, err, report(ctx, pools, procs))
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks not completed %s after the producers stopped (%v); the state:\n%s",
				time.Since(drainFrom).Round(time.Second), err, report(ctx, pools, procs))
		}
		time.Sleep(100 * time.Millisecond) // polling the shards
	}
	t.Logf("drained %s after the producers stopped", time.Since(drainFrom).Round(time.Millisecond))

	// Graceful stop, once each worker has registered on every shard (a
	// worker started a moment ago may not handle SIGTERM yet).
	var last []*childproc.Proc
	for _, p := range procs {
		pgtest.Eventually(t, 2*time.Second, "worker "+p.ID+" registered", func() bool {
			for _, pool := range pools {
				var n int
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_workers WHERE id = $1", p.ID).Scan(&n); err != nil || n == 0 {
					return p.Exited()
				}
			}
			return true
		})
		last = append(last, p)
	}
	childproc.StopGracefully(t, tail, last...)

	losses := map[string][]time.Time{}
	for id, out := range outputs {
		losses[id] = lossesIn(out.String())
	}
	v := verifier{t: t, ctx: ctx, pools: pools, sc: sc, events: events, losses: losses}
	v.verify(prod)

	// The figure the test reports and does not assert: how the shards that
	// stayed up completed tasks in the window before the crash and during
	// the outage.
	for _, w := range windows {
		var line []string
		var before, during float64
		for n, pool := range pools {
			if n == w.shard {
				continue
			}
			b := completedIn(t, ctx, pool, w.beforeFrom, w.crashAt)
			d := completedIn(t, ctx, pool, w.downFrom, w.downTo)
			rb, rd := float64(b)/w.crashAt.Sub(w.beforeFrom).Seconds(), float64(d)/w.downTo.Sub(w.downFrom).Seconds()
			before, during = before+rb, during+rd
			line = append(line, fmt.Sprintf("shard %d %.0f -> %.0f tasks/s", n, rb, rd))
		}
		slices.Sort(line)
		t.Logf("RATE shard %d down: the others completed %.0f tasks/s before, %.0f during (%.2f of before; %s)",
			w.shard, before, during, during/before, strings.Join(line, ", "))
	}
	t.Logf("total time %s (%d workers, %d kills, %d crashes of %s each)", time.Since(began).Round(time.Millisecond),
		s.workers, count(events, "kill"), count(events, "crash"), s.outage)
}

// bootShard boots a throwaway cluster, migrates it and stamps it as shard
// n. Every session of its database commits synchronously: the cluster
// starts with synchronous_commit off, with which a crash loses what was
// committed just before it, acknowledged or not. Autovacuum is off, as in
// the benchmarks.
func bootShard(ctx context.Context, n int) (*devpg.Server, *pgxpool.Pool, error) {
	srv, err := devpg.Find(ctx, devpg.Options{SkipLocal: true})
	if err != nil {
		return nil, nil, err
	}
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		return srv, nil, err
	}
	for _, stmt := range []string{"ALTER DATABASE postgres SET synchronous_commit = on",
		"ALTER SYSTEM SET autovacuum = off", "SELECT pg_reload_conf()"} {
		if _, err = conn.Exec(ctx, stmt); err != nil {
			break
		}
	}
	conn.Close(ctx)
	if err != nil {
		return srv, nil, err
	}
	pool, err := pgxpool.New(ctx, srv.URL)
	if err != nil {
		return srv, nil, err
	}
	if err := migrations.Up(ctx, pool); err != nil {
		return srv, pool, fmt.Errorf("shard %d: %w", n, err)
	}
	if err := migrations.SetShard(ctx, pool, n); err != nil {
		return srv, pool, fmt.Errorf("shard %d: %w", n, err)
	}
	if _, err := pool.Exec(ctx, createLedger); err != nil {
		return srv, pool, fmt.Errorf("shard %d: %w", n, err)
	}
	return srv, pool, nil
}

// backlog is how many tasks without a key the producers keep pending on
// each shard that answers, so that every worker is always busy.
const backlog = 30

// producers enqueue continuously, and record every acknowledged enqueue.
type producers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	plain []int64
	seqs  map[string][]int64 // each key's tasks, in the order enqueued
	uniq  map[string][]int64 // each key's tasks, and the IDs duplicates returned

	failedPlain, failedKeyed, dupes atomic.Int64
	pending                         map[int]*atomic.Int64 // each shard's pending tasks; -1 when it does not answer
	violations                      []string              // a unique key held by two pending or running tasks
}

// startProducers starts, through sc: tasks without a key, at a backlog;
// two sequences per shard, a task each every 200 ms while fewer than four
// of the key's tasks wait, each of whose handlers works 5 ms; and tasks with one of three unique keys per shard,
// one every 10 ms, each of whose handlers works 50 ms, as plain ones do.
// A watcher reads each shard's pending tasks and the unique keys held
// twice, every 100 ms.
func startProducers(t *testing.T, ctx context.Context, sc *queue.ShardedClient, pools map[int]*pgxpool.Pool) *producers {
	ctx, cancel := context.WithCancel(ctx)
	p := &producers{cancel: cancel, seqs: map[string][]int64{}, uniq: map[string][]int64{}, pending: map[int]*atomic.Int64{}}
	for n := range pools {
		p.pending[n] = new(atomic.Int64)
	}
	keys := func(prefix string, each int) []string {
		var out []string
		per := map[int]int{}
		for i := 0; len(out) < each*len(pools); i++ {
			k := fmt.Sprintf("%s:%d", prefix, i)
			if n := sc.ShardFor(k); per[n] < each {
				per[n]++
				out = append(out, k)
			}
		}
		return out
	}
	enqueue := func(name string, work int, opts ...queue.Option) (queue.EnqueueResult, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return sc.Enqueue(ctx, name, payload{WorkMs: work}, opts...)
	}
	pause := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	p.wg.Add(1)
	go func() { // the watcher
		defer p.wg.Done()
		for pause(100 * time.Millisecond) {
			for n, pool := range pools {
				qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
				var pending int64
				var held []string
				err := pool.QueryRow(qctx, `SELECT count(*) FROM skiplock_tasks WHERE status = 'pending'`).Scan(&pending)
				if err == nil {
					var rows pgx.Rows
					rows, err = pool.Query(qctx, `SELECT unique_key FROM skiplock_tasks
						WHERE unique_key IS NOT NULL AND status IN ('pending', 'running') GROUP BY 1 HAVING count(*) > 1`)
					if err == nil {
						held, err = pgx.CollectRows(rows, pgx.RowTo[string])
					}
				}
				qcancel()
				if err != nil {
					pending = -1
				}
				p.pending[n].Store(pending)
				if len(held) > 0 {
					p.mu.Lock()
					p.violations = append(p.violations, fmt.Sprintf("shard %d at %s: %v", n, time.Now().Format("15:04:05.000"), held))
					p.mu.Unlock()
				}
			}
		}
	}()
	for range 2 {
		p.wg.Add(1)
		go func() { // tasks without a key, at a backlog
			defer p.wg.Done()
			for ctx.Err() == nil {
				var sum, answering int64
				for _, v := range p.pending {
					if n := v.Load(); n >= 0 {
						sum, answering = sum+n, answering+1
					}
				}
				if sum >= backlog*answering {
					pause(20 * time.Millisecond)
					continue
				}
				res, err := enqueue("plain", 50)
				id := res.ID
				if err != nil {
					p.failedPlain.Add(1)
					pause(20 * time.Millisecond)
					continue
				}
				p.mu.Lock()
				p.plain = append(p.plain, id)
				p.mu.Unlock()
			}
		}()
	}
	for _, key := range keys("seq", 2) {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			pool := pools[sc.ShardFor(key)]
			for pause(200 * time.Millisecond) {
				// At most a few of a key's tasks wait at once: a sequence
				// drains one task at a time.
				var waiting int
				qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
				err := pool.QueryRow(qctx, `SELECT count(*) FROM skiplock_tasks WHERE sequence_key = $1 AND status <> 'completed'`,
					key).Scan(&waiting)
				qcancel()
				if err == nil && waiting >= 4 {
					continue
				}
				res, err := enqueue("seq", 5, queue.WithSequence(key))
				id := res.ID
				if err != nil {
					p.failedKeyed.Add(1)
					continue
				}
				p.mu.Lock()
				p.seqs[key] = append(p.seqs[key], id)
				p.mu.Unlock()
			}
		}()
	}
	uniq := keys("uniq", 3)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for pause(10 * time.Millisecond) {
			key := uniq[rand.IntN(len(uniq))]
			res, err := enqueue("uniq", 50, queue.WithUniqueKey(key))
			id := res.ID
			if err == nil && res.Duplicate {
				p.dupes.Add(1)
				if id == 0 {
					continue // the task that held the key finished meanwhile
				}
			}
			if err != nil {
				p.failedKeyed.Add(1)
				continue
			}
			p.mu.Lock()
			p.uniq[key] = append(p.uniq[key], id)
			p.mu.Unlock()
		}
	}()
	return p
}

// stop stops every producer and returns once they have.
func (p *producers) stop() {
	p.cancel()
	p.wg.Wait()
}

// acked returns every acknowledged task's ID, once each.
func (p *producers) acked() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := slices.Clone(p.plain)
	for _, s := range p.seqs {
		ids = append(ids, s...)
	}
	for _, u := range p.uniq {
		ids = append(ids, u...)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// run is one handler run in a ledger.
type run struct {
	task             int64
	attempt          int
	worker           string
	claimed, started time.Time
	finished         *time.Time
}

type verifier struct {
	t      *testing.T
	ctx    context.Context
	pools  map[int]*pgxpool.Pool
	sc     *queue.ShardedClient
	events []event
	losses map[string][]time.Time // each worker's noticed losses of a lock session
}

// disrupted reports whether worker, or shard, was disrupted between from
// and to: its worker killed, its shard crashed, or a loss of a lock
// session its worker noticed (which it may notice a while after the
// session ended).
func (v *verifier) disrupted(worker string, shard int, from, to time.Time) bool {
	for _, e := range v.events {
		if ((e.kind == "kill" && e.worker == worker) || (e.kind == "crash" && e.shard == shard)) &&
			!e.after.Before(from) && !e.at.After(to) {
			return true
		}
	}
	for _, l := range v.losses[worker] {
		if !l.Before(from) && l.Before(to.Add(time.Minute)) {
			return true
		}
	}
	return false
}

func (v *verifier) verify(p *producers) {
	t, ctx := v.t, v.ctx
	t.Helper()

	// Nothing lost: every acknowledged task completed on its shard.
	acked := p.acked()
	byShard := map[int][]int64{}
	for _, id := range acked {
		byShard[queue.ShardOf(id)] = append(byShard[queue.ShardOf(id)], id)
	}
	var tasks int
	for n, pool := range v.pools {
		ids := byShard[n]
		delete(byShard, n)
		var done, all int
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id = ANY($1) AND status = 'completed'), count(*)
			FROM skiplock_tasks`, ids).Scan(&done, &all); err != nil {
			t.Fatal(err)
		}
		tasks += all
		if done != len(ids) {
			t.Errorf("shard %d: %d of %d acknowledged tasks completed", n, done, len(ids))
		}
		var fenced, locks int
		pool.QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks t
			WHERE NOT EXISTS (SELECT 1 FROM shardchaos_runs r WHERE r.task_id = t.id AND r.attempt = t.attempt
			                  AND r.worker_id = t.worker_id AND r.finished_at IS NOT NULL)
			   OR EXISTS (SELECT 1 FROM shardchaos_runs r WHERE r.task_id = t.id AND r.attempt > t.attempt)`).Scan(&fenced)
		if fenced != 0 {
			t.Errorf("shard %d: %d tasks' completion is not that of their last claim", n, fenced)
		}
		pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`).Scan(&locks)
		if locks != 0 {
			t.Errorf("shard %d: %d advisory locks left after every worker stopped", n, locks)
		}
	}
	for n, ids := range byShard {
		t.Errorf("%d acknowledged tasks carry shard %d, which does not exist: %v", len(ids), n, ids[:min(len(ids), 5)])
	}

	// Nothing ran twice at once, nor ran again without a disruption.
	runs := map[int64][]run{}
	var nruns, again int
	for _, pool := range v.pools {
		rows, err := pool.Query(ctx, `SELECT task_id, attempt, worker_id, claimed_at, started_at, finished_at
			FROM shardchaos_runs ORDER BY task_id, started_at`)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (run, error) {
			var r run
			return r, row.Scan(&r.task, &r.attempt, &r.worker, &r.claimed, &r.started, &r.finished)
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			runs[r.task] = append(runs[r.task], r)
		}
		nruns += len(rs)
	}
	bad := 0
	for id, rs := range runs {
		shard := queue.ShardOf(id)
		for i := 0; i+1 < len(rs); i++ {
			prev, next := rs[i], rs[i+1]
			again++
			var problem string
			switch {
			case prev.finished != nil && prev.finished.After(next.started):
				problem = "ran twice at once"
			case prev.finished == nil && !v.disrupted(prev.worker, shard, prev.claimed, next.started):
				problem = "ran again, with no disruption, while an earlier run had not finished"
			case prev.finished != nil && !v.disrupted(prev.worker, shard, prev.claimed, next.claimed):
				problem = "completed twice, with no disruption"
			}
			if problem != "" {
				if bad++; bad <= 10 {
					t.Errorf("task %d %s: %s", id, problem, story(rs))
				}
			}
		}
	}

	// Sequences ran in order: each task after the one before completed.
	for key, ids := range p.seqs {
		want := v.sc.ShardFor(key)
		for i, id := range ids {
			if queue.ShardOf(id) != want {
				t.Errorf("sequence %s: task %d is on shard %d, not %d", key, id, queue.ShardOf(id), want)
			}
			if i == 0 {
				continue
			}
			prevRuns, these := runs[ids[i-1]], runs[id]
			var finished *time.Time
			for _, r := range prevRuns {
				if r.finished != nil && (finished == nil || r.finished.After(*finished)) {
					finished = r.finished
				}
			}
			switch {
			case id <= ids[i-1]:
				t.Errorf("sequence %s: task %d enqueued after task %d has a lower ID", key, id, ids[i-1])
			case finished == nil || len(these) == 0:
				t.Errorf("sequence %s: task %d or %d has no finished run", key, ids[i-1], id)
			case !these[0].started.After(*finished):
				t.Errorf("sequence %s: task %d started at %s, before task %d, ahead of it, finished at %s", key, id,
					these[0].started.Format("15:04:05.000000"), ids[i-1], finished.Format("15:04:05.000000"))
			}
		}
	}

	// Unique keys: every task of a key on its shard, and never two
	// pending or running at once (the watcher's snapshots).
	var uniqTasks int
	for n, pool := range v.pools {
		rows, err := pool.Query(ctx, `SELECT unique_key, count(*) FROM skiplock_tasks WHERE unique_key IS NOT NULL GROUP BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var key string
			var c int
			if err := rows.Scan(&key, &c); err != nil {
				t.Fatal(err)
			}
			uniqTasks += c
			if want := v.sc.ShardFor(key); want != n {
				t.Errorf("unique key %s: %d tasks on shard %d, not on its shard %d", key, c, n, want)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range p.violations {
		t.Errorf("a unique key held by two pending or running tasks: %s", s)
	}

	var seqTasks int
	for _, ids := range p.seqs {
		seqTasks += len(ids)
	}
	t.Logf("%d tasks, %d acknowledged (%d in %d sequences, %d with %d unique keys, %d duplicates refused); "+
		"%d enqueues without a key and %d with one failed; %d handler runs, %d of them a task's run again, each after a disruption "+
		"(%d lock session losses noticed)",
		tasks, len(acked), seqTasks, len(p.seqs), uniqTasks, len(p.uniq), p.dupes.Load(), p.failedPlain.Load(), p.failedKeyed.Load(),
		nruns, again, countLosses(v.losses))
}

// story tells a task's runs, for a failure message.
func story(rs []run) string {
	var b strings.Builder
	for _, r := range rs {
		finished := "never"
		if r.finished != nil {
			finished = r.finished.Format("15:04:05.000000")
		}
		fmt.Fprintf(&b, "\n  run: %s attempt %d claimed %s started %s finished %s", r.worker, r.attempt,
			r.claimed.Format("15:04:05.000000"), r.started.Format("15:04:05.000000"), finished)
	}
	return b.String()
}

// lossesIn reads a worker's noticed losses of a lock session from its
// output.
func lossesIn(out string) []time.Time {
	var at []time.Time
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, lossMark); ok {
			if ns, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64); err == nil {
				at = append(at, time.Unix(0, ns))
			}
		}
	}
	return at
}

func countLosses(losses map[string][]time.Time) int {
	n := 0
	for _, l := range losses {
		n += len(l)
	}
	return n
}

// completedIn counts the tasks of a shard completed in [from, to).
func completedIn(t *testing.T, ctx context.Context, pool *pgxpool.Pool, from, to time.Time) int {
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks
		WHERE status = 'completed' AND finished_at >= $1 AND finished_at < $2`, from, to).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// finishedBy counts the finished handler runs of worker on every shard
// that answers.
func finishedBy(ctx context.Context, pools map[int]*pgxpool.Pool, worker string) int {
	total := 0
	for _, pool := range pools {
		var n int
		if pool.QueryRow(ctx, "SELECT count(*) FROM shardchaos_runs WHERE worker_id = $1 AND finished_at IS NOT NULL", worker).Scan(&n) == nil {
			total += n
		}
	}
	return total
}

// notCompleted counts the tasks of every shard that are not completed,
// and of those the ones that ended otherwise (failed or cancelled).
func notCompleted(ctx context.Context, pools map[int]*pgxpool.Pool) (left, ended int, err error) {
	for n, pool := range pools {
		var l, e int
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status <> 'completed'),
			count(*) FILTER (WHERE status IN ('failed', 'cancelled')) FROM skiplock_tasks`).Scan(&l, &e); err != nil {
			return -1, 0, fmt.Errorf("shard %d: %w", n, err)
		}
		left, ended = left+l, ended+e
	}
	return left, ended, nil
}

// report says where a run that does not drain stands: each shard's tasks
// not completed, by status and name, and each worker's log.
func report(ctx context.Context, pools map[int]*pgxpool.Pool, procs map[int]*childproc.Proc) string {
	var b strings.Builder
	for n, pool := range pools {
		rows, err := pool.Query(ctx, `SELECT status, name, count(*), max(attempt), array_agg(DISTINCT worker_id),
			(min(run_at) - now())::text, max((errors->-1)::text) FROM skiplock_tasks WHERE status <> 'completed' GROUP BY 1, 2 ORDER BY 1, 2`)
		if err != nil {
			fmt.Fprintf(&b, "shard %d: %v\n", n, err)
			continue
		}
		for rows.Next() {
			vals, _ := rows.Values()
			fmt.Fprintf(&b, "shard %d: %v\n", n, vals)
		}
		rows.Close()
	}
	for _, p := range procs {
		fmt.Fprintf(&b, "worker %s:\n%s\n", p.ID, tail(p.Out.String()))
	}
	return b.String()
}

// sleepRespawning waits d, restarting the workers that exit meanwhile.
func sleepRespawning(d time.Duration, respawn func()) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		respawn()
		time.Sleep(min(100*time.Millisecond, time.Until(end))) // a phase of the test: a duration, not a wait for a condition
	}
}

func count(events []event, kind string) int {
	n := 0
	for _, e := range events {
		if e.kind == kind {
			n++
		}
	}
	return n
}

func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
