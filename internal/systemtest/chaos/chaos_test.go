// Package chaos breaks skiplock on purpose and checks that no task is lost.
//
// Worker processes (this test binary, re-executed in worker mode) work a
// backlog while the test SIGKILLs random workers and restarts them,
// terminates random lock sessions with pg_terminate_backend, and restarts
// PostgreSQL once. Every handler records its execution in chaos_runs. At the
// end: every task completed; a task ran twice only when its worker was cut
// off mid-task; no completion came from a fenced worker; no advisory lock
// is left. It prints rescue latency (kill to re-claim) and totals.
//
// It asserts outcomes, never speed: on a busy machine everything is slower,
// and a CI gate must not turn red because of that. Rescue latency is a
// figure it reports, beside the scheduling delay it measured meanwhile (how
// late a 10 ms timer fired in this process), and compares with the README's
// promise in the log; a lost task still fails it, after 10 minutes (at once
// if it failed for good). A minute without a completed task logs where the
// run stands (stallReport: the tasks, leaders, sessions, PgBouncer's pools,
// each worker's log and goroutines) and the run goes on. A stretch in which
// this process did not run at all (a suspended machine) counts as a
// disruption of every worker, and not against those limits.
//
// The short form runs in the test suite. The long form (20,000 tasks, 4
// workers, handlers of 5-155 ms, a kill every 2 s, a terminated session every
// 3 s):
//
//	go test -run TestChaos -v -timeout 30m ./internal/chaos -chaos.long
//
// The partition tests (partition_test.go) put one worker process in a
// network namespace of their own and blackhole it for 30 s; they need root,
// ip and iptables. Their long form repeats each mode three times, and adds
// advisory runs whose cut-off worker leaves the operating system's TCP
// settings, so that only the stale-heartbeat termination ends its session:
//
//	go test -run TestPartition -v -timeout 30m ./internal/chaos -chaos.long
package chaos

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
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
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

var long = flag.Bool("chaos.long", false, "run the long chaos test (20,000 tasks, 4 workers)")

const (
	envWorker = "SKIPLOCK_CHAOS_WORKER" // worker mode: the worker's ID
	envURL    = "SKIPLOCK_CHAOS_URL"
	envWork   = "SKIPLOCK_CHAOS_WORK_MS" // a handler's work: a random duration up to this
	envMode   = "SKIPLOCK_CHAOS_MODE"    // "lease": through PgBouncer, with leases
	envListen = "SKIPLOCK_CHAOS_LISTEN"  // lease mode: a direct URL for LISTEN
	envFixed  = "SKIPLOCK_CHAOS_FIXED"   // "1": every handler works exactly WORK_MS
	envLease  = "SKIPLOCK_CHAOS_LEASE_MS"
	envLog    = "SKIPLOCK_CHAOS_LOG"          // "info": log at info, not warn
	envNoTCP  = "SKIPLOCK_CHAOS_NO_KEEPALIVE" // "1": the operating system's TCP settings on the lock session
	envPoison = "SKIPLOCK_CHAOS_POISON"       // "default": Config.MaxCrashes at its default (the long form)
)

// chaosLease is the lease each lease-mode worker holds on a task: what a
// dead worker costs before its tasks are rescued.
const chaosLease = 2 * time.Second

func TestMain(m *testing.M) {
	if id := os.Getenv(envWorker); id != "" {
		if err := workerMain(id, os.Getenv(envURL)); err != nil {
			fmt.Fprintln(os.Stderr, "chaos worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// workerMain is one worker process: its handler records each execution.
func workerMain(id, url string) error {
	// SIGUSR1 prints every goroutine's stack, grouped, for a stall's report.
	dump := make(chan os.Signal, 1)
	signal.Notify(dump, syscall.SIGUSR1)
	go func() {
		for range dump {
			fmt.Fprintf(os.Stderr, "%s\n", goroutinesBegin)
			pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			fmt.Fprintf(os.Stderr, "%s\n", goroutinesEnd)
		}
	}()
	workMs, err := strconv.Atoi(os.Getenv(envWork))
	if err != nil || workMs < 1 {
		workMs = 45
	}
	work := func() time.Duration { return time.Duration(5+rand.IntN(workMs)) * time.Millisecond }
	if os.Getenv(envFixed) == "1" {
		work = func() time.Duration { return time.Duration(workMs) * time.Millisecond }
	}
	lease := chaosLease
	if ms, err := strconv.Atoi(os.Getenv(envLease)); err == nil && ms > 0 {
		lease = time.Duration(ms) * time.Millisecond
	}
	level := slog.LevelWarn
	if os.Getenv(envLog) == "info" {
		level = slog.LevelInfo
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	handlers := worker.Handlers{"chaos": func(ctx context.Context, t *worker.Task) error {
		var run int64
		err := pool.QueryRow(ctx, `INSERT INTO chaos_runs (task_id, attempt, worker_id, claimed_at, started_at)
			VALUES ($1, $2, $3, $4, $5) RETURNING id`, t.ID, t.Attempt, id, t.StartedAt, time.Now()).Scan(&run)
		if err != nil {
			return err
		}
		select {
		case <-time.After(work()):
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err = pool.Exec(ctx, "UPDATE chaos_runs SET finished_at = $2 WHERE id = $1", run, time.Now())
		return err
	}}
	cfg := worker.Config{
		WorkerID:     id,
		Concurrency:  16,
		RetryBackoff: func(int) time.Duration { return 100 * time.Millisecond },
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	}
	if os.Getenv(envPoison) != "default" {
		// The killer picks workers, not tasks: every task it catches
		// running is innocent, and with a kill every second on a loaded
		// machine one may be caught three times, each time run alone as a
		// suspect, and be quarantined as poison, which is right for a real
		// crash loop and wrong here. Quarantine has its own tests
		// (worker's TestPoisonTaskQuarantined); the long form, with a kill
		// every 2 s, keeps the default and reports any.
		cfg.MaxCrashes = 1000
	}
	if os.Getenv(envMode) == "lease" {
		cfg.Mode, cfg.LeaseDuration, cfg.ListenURL = worker.ModeLease, lease, os.Getenv(envListen)
	}
	if os.Getenv(envNoTCP) == "1" {
		cfg.TCPKeepaliveIdle, cfg.TCPKeepaliveInterval, cfg.TCPKeepaliveCount, cfg.TCPUserTimeout = -1, -1, -1, -1
	}
	cfg.Observer = lossRecorder{pool: pool, worker: id}
	w := worker.New(pool, cfg)
	return w.Run(ctx, handlers)
}

// lossRecorder writes down each loss of the worker's lock session that the
// worker itself noticed: on a busy machine a ping or a heartbeat can time
// out, or the rescuer can end a session whose heartbeat went stale, and the
// worker then gives its tasks up. Such a loss explains a run whose outcome
// was not recorded as surely as a kill does; the ledger reads them.
type lossRecorder struct {
	worker.NopObserver
	pool   *pgxpool.Pool
	worker string
}

func (r lossRecorder) LockSessionLost(int) {
	at := time.Now()
	go func() {
		// The server may be down (a restart is one of the disruptions):
		// keep trying for a while; a restart is an event of its own anyway.
		for i := 0; i < 100; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := r.pool.Exec(ctx, "INSERT INTO chaos_losses (worker_id, at) VALUES ($1, $2)", r.worker, at)
			cancel()
			if err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // a pause between retries, in the worker process
		}
	}()
}

// proc is a worker process: this test binary, re-executed in worker mode.
type proc = childproc.Proc

// startProc starts cmd as the worker process id, with env added to this
// process's environment.
func startProc(t *testing.T, id string, cmd *exec.Cmd, env ...string) *proc {
	t.Helper()
	return childproc.Start(t, id, cmd, append([]string{envWorker + "=" + id}, env...)...)
}

// stopGracefully sends every process SIGTERM, then checks that each exits
// 0 within a minute.
func stopGracefully(t *testing.T, procs ...*proc) {
	t.Helper()
	childproc.StopGracefully(t, tail, procs...)
}

// event is a disruption. at is taken just before it and after just after
// it, so that it surely happened between the two however slowly this
// process was scheduled.
type event struct {
	at     time.Time
	after  time.Time
	kind   string // kill, terminate, restart, pause (this process did not run)
	worker string // "" for restart and pause: every worker
	tasks  []int64
}

// TestChaos runs workers in advisory mode on direct connections.
func TestChaos(t *testing.T) { runChaos(t, "advisory") }

// TestChaosLease runs workers in lease mode through a PgBouncer in
// transaction pooling mode; terminated sessions are the pooler's server
// connections, and LISTEN goes over a direct connection.
func TestChaosLease(t *testing.T) { runChaos(t, "lease") }

func runChaos(t *testing.T, mode string) {
	tasks, workers, workMs := 4000, 3, 45
	killEvery, terminateEvery := 700*time.Millisecond, 900*time.Millisecond
	poison := "off" // see worker's MaxCrashes
	if *long {
		tasks, workers, workMs = 20000, 4, 150
		killEvery, terminateEvery = 2*time.Second, 3*time.Second
		poison = "default"
	}
	ctx := context.Background()
	began := time.Now()
	delay := measureSchedulingDelay()

	// A server of our own, because the test restarts it.
	srv, err := devpg.Find(ctx, devpg.Options{SkipLocal: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	pool, err := pgxpool.New(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, createRuns)
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]queue.NewTask, tasks)
	for i := range batch {
		batch[i] = queue.NewTask{Name: "chaos", Payload: i}
	}
	if _, err := queue.New(pool).EnqueueMany(ctx, batch); err != nil {
		t.Fatal(err)
	}
	workerURL := srv.URL
	var bouncer *pgtest.Bouncer
	if mode == "lease" {
		bouncer = pgtest.StartPgBouncer(t, srv.URL, "")
		workerURL = bouncer.URL
	}

	var mu sync.Mutex
	procs := map[int]*proc{}
	generation := 0
	outputs := map[string]*childproc.Buffer{} // every worker's, for a failure's report
	spawn := func(slot int) {
		generation++
		id := fmt.Sprintf("chaos-w%d-%d", slot, generation)
		procs[slot] = startProc(t, id, exec.Command(os.Args[0], "-test.run=^$"),
			envURL+"="+workerURL, envWork+"="+strconv.Itoa(workMs), envMode+"="+mode, envListen+"="+srv.URL, envLog+"=info", envPoison+"="+poison)
		outputs[id] = procs[slot].Out
	}
	for i := range workers {
		spawn(i)
	}
	defer func() {
		for _, p := range procs {
			p.Cmd.Process.Kill()
		}
	}()
	running := func(workerID string) []int64 {
		rows, _ := pool.Query(ctx, "SELECT id FROM skiplock_tasks WHERE status = 'running' AND worker_id = $1", workerID)
		ids, _ := pgx.CollectRows(rows, pgx.RowTo[int64])
		return ids
	}
	// completed counts the completed tasks, and those that ended otherwise
	// (failed, cancelled): lost, since no handler fails for good.
	completed := func() (done, ended int) {
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'completed'),
			count(*) FILTER (WHERE status IN ('failed', 'cancelled')) FROM skiplock_tasks`).Scan(&done, &ended)
		if err != nil {
			return -1, 0 // the server may be restarting
		}
		return done, ended
	}

	var events []event
	progress := progressMark{at: time.Now()}
	// Jittered, so that kills do not fall in step with the rescuer's ticks
	// (which would flatter the measured rescue latency).
	jitter := func(d time.Duration) <-chan time.Time {
		return time.After(time.Duration(float64(d) * (0.5 + rand.Float64())))
	}
	kill, terminate := jitter(killEvery), jitter(terminateEvery)
	restarted := false
	deadline := time.Now().Add(10 * time.Minute)
	// A run in which nothing completes for a minute reports where it stands
	// then, and goes on: a stall that ends by itself is a finding too.
	report := func() string { return stallReport(ctx, pool, procs, bouncer, began, events, progress) }
	// A machine that was suspended (or starved this process) paused the
	// workers and the server too, most likely: a disruption of every
	// worker, whose length is not the run's.
	takePauses := func() {
		for _, p := range delay.pauses() {
			d := p.to.Sub(p.from)
			events = append(events, event{at: p.from, after: p.to, kind: "pause"})
			deadline, progress.at = deadline.Add(d), progress.at.Add(d)
			t.Logf("this process did not run for %s (the machine was suspended or starved): counted as a disruption of every worker, not against the deadline",
				d.Round(time.Millisecond))
		}
	}
	for done, ended := completed(); done < tasks; done, ended = completed() {
		takePauses()
		if ended > 0 {
			t.Fatalf("%d tasks failed or were cancelled (lost: no handler fails for good); the state then:\n%s", ended, report())
		}
		if done > progress.done {
			progress = progressMark{done: done, at: time.Now()}
		} else if time.Since(progress.at) > stallAfter && !progress.reported {
			delay.sync() // a pause this loop saw first is not a stall
			takePauses()
			if since := time.Since(progress.at); since > stallAfter {
				progress.reported = true
				t.Logf("no task completed for %s (%d of %d completed); the state now:\n%s", since.Round(time.Second), progress.done, tasks, report())
			}
		}
		if time.Now().After(deadline) {
			delay.sync()
			takePauses()
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d tasks completed after 10 minutes; the state then:\n%s", done, tasks, report())
			}
		}
		// A supervisor restarts a worker that exits by itself: one started
		// while the database was down fails its startup, as it should.
		mu.Lock()
		for slot, p := range procs {
			if p.Exited() {
				t.Logf("worker %s exited by itself (%v); restarting it: %s", p.ID, p.Err(), firstLine(p.Out.String()))
				spawn(slot)
			}
		}
		mu.Unlock()
		select {
		case <-kill:
			kill = jitter(killEvery)
			mu.Lock()
			slot := rand.IntN(workers)
			p := procs[slot]
			victims := running(p.ID)
			at := time.Now()
			p.Cmd.Process.Signal(syscall.SIGKILL)
			after := time.Now()
			<-p.Done()
			events = append(events, event{at: at, after: after, kind: "kill", worker: p.ID, tasks: victims})
			spawn(slot)
			mu.Unlock()
		case <-terminate:
			terminate = jitter(terminateEvery)
			var pid int32
			var id string
			// Advisory mode: a worker's lock session. Lease mode: any
			// server connection but ours, which may serve any worker.
			query := `SELECT w.lock_backend_pid, w.id FROM skiplock_workers w
				JOIN pg_stat_activity a ON a.pid = w.lock_backend_pid ORDER BY random() LIMIT 1`
			if mode == "lease" {
				query = `SELECT pid, '' FROM pg_stat_activity WHERE datname = current_database()
					AND backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1`
			}
			err := pool.QueryRow(ctx, query).Scan(&pid, &id)
			if err == nil {
				victims := running(id)
				at := time.Now()
				if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err == nil {
					events = append(events, event{at: at, after: time.Now(), kind: "terminate", worker: id, tasks: victims})
				}
			}
		case <-time.After(100 * time.Millisecond):
			if !restarted && done >= tasks/2 {
				restarted = true
				at := time.Now()
				if err := srv.Restart(ctx); err != nil {
					t.Fatalf("restarting PostgreSQL: %v", err)
				}
				events = append(events, event{at: at, after: time.Now(), kind: "restart"})
				t.Logf("PostgreSQL restarted at %d/%d completed, down for %s", done, tasks, time.Since(at))
			}
		}
	}
	workTime := time.Since(began)

	// Graceful stop: every worker exits 0 and releases every lock. A worker
	// respawned a moment ago may not handle SIGTERM yet: wait until each
	// has registered, which it does after installing its handler (or has
	// exited, which stopGracefully reports).
	var last []*proc
	for _, p := range procs {
		pgtest.Eventually(t, 2*time.Second, "worker "+p.ID+" registered", func() bool {
			var n int
			err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_workers WHERE id = $1", p.ID).Scan(&n)
			return (err == nil && n == 1) || p.Exited()
		})
		last = append(last, p)
	}
	stopGracefully(t, last...)
	// The README's figure: advisory mode rescues within RescueInterval (1s)
	// of a SIGKILL, and each rescued task of a dead process then runs
	// alone once, one after another (worker/isolate.go), which with a kill
	// every 2 s measured a max of 5.4 s; lease mode within the lease plus
	// RescueInterval, before the same. Reported against the measured
	// latency, not asserted (see the package comment).
	promise := 6 * time.Second
	if mode == "lease" {
		promise = chaosLease + 6*time.Second
	}
	logOf := func(id string) string {
		if out := outputs[id]; out != nil {
			return tail(out.String())
		}
		return ""
	}
	verify(t, ctx, pool, tasks, events, restarted, promise, delay.stop(), logOf)
	t.Logf("%s mode: total time %s (%d tasks, %d workers, %d kills, %d terminated sessions, 1 PostgreSQL restart)",
		mode, workTime.Round(time.Millisecond), tasks, workers, count(events, "kill"), count(events, "terminate"))
}

// createRuns is the ledger every chaos and partition worker writes: one
// row per handler run, with the claim it ran under.
const createRuns = `CREATE TABLE chaos_runs (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	task_id bigint NOT NULL, attempt int NOT NULL, worker_id text NOT NULL,
	claimed_at timestamptz NOT NULL, started_at timestamptz NOT NULL, finished_at timestamptz);
CREATE TABLE chaos_losses (worker_id text NOT NULL, at timestamptz NOT NULL)`

func verify(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tasks int, events []event, restarted bool,
	promise time.Duration, delay schedulingDelay, logOf func(worker string) string) {
	t.Helper()
	if !restarted {
		t.Error("PostgreSQL was never restarted")
	}
	var notDone, locks int
	pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE status <> 'completed'").Scan(&notDone)
	if notDone != 0 {
		t.Errorf("%d tasks not completed", notDone)
	}
	pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND classid = 'skiplock_tasks'::regclass::oid AND objsubid = 2`).Scan(&locks)
	if locks != 0 {
		t.Errorf("%d task advisory locks left after every worker stopped", locks)
	}

	// The completion of every task is that of its last claim: a fenced
	// worker (one whose claim was rescued) never wrote it.
	var fenced int
	pool.QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks t
		WHERE NOT EXISTS (SELECT 1 FROM chaos_runs r WHERE r.task_id = t.id AND r.attempt = t.attempt
		                  AND r.worker_id = t.worker_id AND r.finished_at IS NOT NULL)
		   OR EXISTS (SELECT 1 FROM chaos_runs r WHERE r.task_id = t.id AND r.attempt > t.attempt)`).Scan(&fenced)
	if fenced != 0 {
		t.Errorf("%d tasks' completion is not that of their last claim", fenced)
	}

	// A handler that finished but whose completion was not recorded is
	// explained only by a disruption of its worker (or of every worker)
	// after its claim and before the task's next claim: the causal window,
	// which holds however slow the machine is.
	type run struct {
		task                       int64
		worker                     string
		claimed, finish, nextClaim time.Time
	}
	rows, err := pool.Query(ctx, `SELECT r.task_id, r.worker_id, r.claimed_at, r.finished_at,
			(SELECT min(n.claimed_at) FROM chaos_runs n WHERE n.task_id = r.task_id AND n.claimed_at > r.claimed_at)
		FROM chaos_runs r
		JOIN skiplock_tasks t ON t.id = r.task_id
		WHERE r.finished_at IS NOT NULL AND NOT (r.attempt = t.attempt AND r.worker_id = t.worker_id)`)
	if err != nil {
		t.Fatal(err)
	}
	extra, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (run, error) {
		var r run
		var next *time.Time
		err := row.Scan(&r.task, &r.worker, &r.claimed, &r.finish, &next)
		if next != nil {
			r.nextClaim = *next
		} else {
			r.nextClaim = time.Now() // no later claim recorded: any disruption since
		}
		return r, err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A loss of its lock session that the worker noticed itself explains a
	// run of that worker claimed before the loss and finished shortly
	// before it (its outcome was waiting to be written).
	type loss struct {
		worker string
		at     time.Time
	}
	lrows, err := pool.Query(ctx, "SELECT worker_id, at FROM chaos_losses")
	if err != nil {
		t.Fatal(err)
	}
	losses, err := pgx.CollectRows(lrows, func(row pgx.CollectableRow) (loss, error) {
		var l loss
		return l, row.Scan(&l.worker, &l.at)
	})
	if err != nil {
		t.Fatal(err)
	}
	var unexplained, selfLost int
	for _, r := range extra {
		explained := false
		for _, e := range events {
			if (e.worker == r.worker || e.worker == "") && !e.after.Before(r.claimed) && !e.at.After(r.nextClaim) {
				explained = true
				break
			}
		}
		for _, l := range losses {
			if !explained && l.worker == r.worker && !l.at.Before(r.claimed) && l.at.Sub(r.finish) < time.Minute {
				explained = true
				selfLost++
			}
		}
		if !explained {
			unexplained++
			t.Errorf("task %d: run by %s finished at %s but was not recorded, with no disruption of its worker; the task:\n%s\nits worker's log:\n%s",
				r.task, r.worker, r.finish, taskStory(ctx, pool, r.task, r.claimed, r.nextClaim, events), logOf(r.worker))
		}
	}
	var runs, tasksRunTwice int
	pool.QueryRow(ctx, "SELECT count(*) FROM chaos_runs WHERE finished_at IS NOT NULL").Scan(&runs)
	pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT task_id FROM chaos_runs WHERE finished_at IS NOT NULL
		GROUP BY task_id HAVING count(*) > 1) d`).Scan(&tasksRunTwice)
	t.Logf("%d completed handler runs for %d tasks: %d tasks ran to the end more than once, all after their worker was cut off (%d unexplained; %d by a lock session loss the worker noticed itself, of %d such losses)",
		runs, tasks, tasksRunTwice, unexplained, selfLost, len(losses))

	// Rescue latency: from a SIGKILL to the next start of each task the
	// killed worker was running.
	var latencies []time.Duration
	for _, e := range events {
		if e.kind != "kill" {
			continue
		}
		for _, id := range e.tasks {
			var next time.Time
			err := pool.QueryRow(ctx, "SELECT min(started_at) FROM chaos_runs WHERE task_id = $1 AND started_at > $2", id, e.at).Scan(&next)
			if err == nil && !next.IsZero() {
				latencies = append(latencies, next.Sub(e.at))
			}
		}
	}
	if len(latencies) == 0 {
		t.Error("no task was running on a killed worker: the test measured no rescue")
		return
	}
	slices.Sort(latencies)
	p50, worst := latencies[len(latencies)/2], latencies[len(latencies)-1]
	t.Logf("rescue latency after SIGKILL (kill to re-claim), %d tasks: p50 %s, max %s; the README promises %s",
		len(latencies), p50.Round(time.Millisecond), worst.Round(time.Millisecond), promise)
	t.Logf("scheduling delay meanwhile (a 10 ms timer in this process fired late by): p50 %s, p99 %s, max %s",
		delay.p50, delay.p99, delay.max)
	if worst > promise {
		t.Logf("NOTE: over the promise by %s; on a busy machine that is expected, and this test asserts no speed",
			(worst - promise).Round(time.Millisecond))
	}
}

// schedulingDelay summarizes how late a timer fired: a measure of how busy
// the machine was.
type schedulingDelay struct{ p50, p99, max time.Duration }

type delayProbe struct {
	done chan struct{}
	out  chan schedulingDelay

	mu     sync.Mutex
	paused []pause   // not yet taken
	woke   time.Time // the end of the last sleep
}

// pause is a stretch of time in which this process did not run: the
// machine was suspended, or starved it of CPU for that long.
type pause struct{ from, to time.Time }

// pauseAfter is how late a 10 ms timer must fire to count as a pause.
const pauseAfter = 10 * time.Second

// measureSchedulingDelay sleeps 10 ms again and again until stop, recording
// how late each wake-up came, and pauses.
func measureSchedulingDelay() *delayProbe {
	p := &delayProbe{done: make(chan struct{}), out: make(chan schedulingDelay, 1)}
	go func() {
		var late []time.Duration
		for {
			select {
			case <-p.done:
				slices.Sort(late)
				var d schedulingDelay
				if n := len(late); n > 0 {
					d = schedulingDelay{p50: late[n/2], p99: late[n*99/100], max: late[n-1]}
				}
				d.p50, d.p99, d.max = d.p50.Round(time.Millisecond), d.p99.Round(time.Millisecond), d.max.Round(time.Millisecond)
				p.out <- d
				return
			default:
			}
			before := time.Now()
			time.Sleep(10 * time.Millisecond)
			late = append(late, time.Since(before)-10*time.Millisecond)
			p.mu.Lock()
			p.woke = time.Now()
			if late[len(late)-1] > pauseAfter {
				p.paused = append(p.paused, pause{from: before, to: p.woke})
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// sync waits until the probe has woken after the call (up to 5 seconds),
// so that a pause that just ended is among pauses.
func (p *delayProbe) sync() {
	called := time.Now()
	for time.Since(called) < 5*time.Second {
		p.mu.Lock()
		woke := p.woke
		p.mu.Unlock()
		if woke.After(called) {
			return
		}
		time.Sleep(time.Millisecond) // the probe wakes every 10 ms
	}
}

// pauses returns the pauses seen since the last call.
func (p *delayProbe) pauses() []pause {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.paused
	p.paused = nil
	return out
}

func (p *delayProbe) stop() schedulingDelay {
	close(p.done)
	return <-p.out
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

// taskStory tells what is known of a task for a failure message: its runs
// in the ledger, its row's error history, and every disruption from a
// second before the run's claim to a second after the next claim.
func taskStory(ctx context.Context, pool *pgxpool.Pool, id int64, claimed, nextClaim time.Time, events []event) string {
	var b strings.Builder
	rows, err := pool.Query(ctx, `SELECT worker_id, attempt, claimed_at, started_at, finished_at
		FROM chaos_runs WHERE task_id = $1 ORDER BY claimed_at, started_at`, id)
	if err == nil {
		for rows.Next() {
			var worker string
			var attempt int
			var claimedAt, startedAt time.Time
			var finishedAt *time.Time
			if err = rows.Scan(&worker, &attempt, &claimedAt, &startedAt, &finishedAt); err != nil {
				break
			}
			finished := "never"
			if finishedAt != nil {
				finished = finishedAt.Format("15:04:05.000")
			}
			fmt.Fprintf(&b, "  run: %s attempt %d claimed %s started %s finished %s\n", worker, attempt,
				claimedAt.Format("15:04:05.000000"), startedAt.Format("15:04:05.000"), finished)
		}
		rows.Close()
		err = errors.Join(err, rows.Err())
	}
	var status, worker string
	var attempt int
	var history []byte
	if err == nil {
		err = pool.QueryRow(ctx, `SELECT status, attempt, coalesce(worker_id, ''), errors::text FROM skiplock_tasks WHERE id = $1`, id).
			Scan(&status, &attempt, &worker, &history)
	}
	if err != nil {
		fmt.Fprintf(&b, "  (reading it: %v)\n", err)
	}
	fmt.Fprintf(&b, "  now: %s, attempt %d, by %s; history %s\n", status, attempt, worker, history)
	for _, e := range events {
		if !e.after.Before(claimed.Add(-time.Second)) && !e.at.After(nextClaim.Add(time.Second)) {
			fmt.Fprintf(&b, "  event: %s of %q at %s-%s, its tasks %v\n", e.kind, e.worker,
				e.at.Format("15:04:05.000"), e.after.Format("15:04:05.000"), e.tasks)
		}
	}
	return b.String()
}

func tail(s string) string {
	// A stall's report asked for goroutine dumps: not the log.
	for {
		i := strings.Index(s, goroutinesBegin)
		j := strings.Index(s, goroutinesEnd)
		if i < 0 || j < i {
			break
		}
		s = s[:i] + s[j+len(goroutinesEnd):]
	}
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// stallAfter is how long a run may go without a completed task before it
// reports where it stands (stallReport).
const stallAfter = time.Minute

// progressMark is the last time the count of completed tasks grew.
type progressMark struct {
	done     int
	at       time.Time
	reported bool // a stall since has been reported
}

// stallReport says where a run that stopped making progress stands: the
// clock's drift, the tasks by status and last outcome (and, running, how
// many leases have expired), the elected jobs' leaders, the worker rows, the server's
// sessions and the locks they wait for, PgBouncer's pools and log (lease
// mode), the disruptions since the last completion, and the tail of each
// current worker's log and goroutines: where a live worker is stuck.
func stallReport(ctx context.Context, pool *pgxpool.Pool, procs map[int]*proc, bouncer *pgtest.Bouncer,
	began time.Time, events []event, progress progressMark) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var b strings.Builder
	query := func(title, sql string) {
		fmt.Fprintf(&b, "%s:\n", title)
		rows, err := pool.Query(ctx, sql)
		if err != nil {
			fmt.Fprintf(&b, "  (%v)\n", err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				fmt.Fprintf(&b, "  (%v)\n", err)
				return
			}
			fmt.Fprintf(&b, "  %v\n", vals)
		}
		if err := rows.Err(); err != nil {
			fmt.Fprintf(&b, "  (%v)\n", err)
		}
	}
	fmt.Fprintf(&b, "last completion %s ago (%d completed); disruptions since:", time.Since(progress.at).Round(time.Millisecond), progress.done)
	for _, kind := range []string{"kill", "terminate", "restart", "pause"} {
		n := 0
		for _, e := range events {
			if e.kind == kind && e.at.After(progress.at) {
				n++
			}
		}
		fmt.Fprintf(&b, " %d %s", n, kind)
	}
	b.WriteString("\n")
	// A wall clock stepped back leaves pending tasks not yet due and leases
	// and leaderships unexpired for as long as the step.
	fmt.Fprintf(&b, "wall clock minus monotonic clock since the run began: %s\n",
		(time.Now().Round(0).Sub(began.Round(0)) - time.Since(began)).Round(time.Millisecond))
	query("tasks (status, last outcome, count, expired leases, max attempt, soonest run_at from now, oldest started, newest finished)",
		`SELECT status, errors->-1->>'outcome', count(*), count(*) FILTER (WHERE locked_until < now()), max(attempt),
		(min(run_at) - now())::text, min(started_at), max(finished_at) FROM skiplock_tasks GROUP BY 1, 2 ORDER BY 1, 2`)
	query("running tasks by worker (worker, count, soonest lease end from now)", `SELECT worker_id, count(*), (min(locked_until) - now())::text
		FROM skiplock_tasks WHERE status = 'running' GROUP BY 1 ORDER BY 1`)
	query("leaders (job, holder, expires in)", "SELECT job, holder, (expires_at - now())::text FROM skiplock_leaders")
	query("workers (id, heartbeat age, lock backend)", `SELECT id, (now() - heartbeat_at)::text, lock_backend_pid FROM skiplock_workers
		ORDER BY heartbeat_at DESC LIMIT 10`)
	query("sessions (state, wait, count; max_connections)", `SELECT state, wait_event_type || ':' || wait_event, count(*),
		current_setting('max_connections') FROM pg_stat_activity WHERE backend_type = 'client backend' GROUP BY 1, 2 ORDER BY 3 DESC`)
	query("sessions not idle (pid, blocked by, state, wait, for, in transaction for, xmin age, query)", `SELECT pid, pg_blocking_pids(pid),
		state, wait_event_type || ':' || wait_event, (now() - state_change)::text, (now() - xact_start)::text, age(backend_xmin), left(query, 120)
		FROM pg_stat_activity
		WHERE datname = current_database() AND state <> 'idle' AND pid <> pg_backend_pid() ORDER BY xact_start LIMIT 40`)
	query("locks waited for (pid, type, mode, relation, transaction)", `SELECT pid, locktype, mode, relation::regclass, transactionid
		FROM pg_locks WHERE NOT granted LIMIT 40`)
	if bouncer != nil {
		for _, what := range []string{"POOLS", "SERVERS", "CLIENTS"} {
			out, err := bouncer.Show(ctx, what)
			if err != nil {
				out += fmt.Sprintf("(%v)\n", err)
			}
			fmt.Fprintf(&b, "pgbouncer SHOW %s:\n%s", what, out)
		}
		fmt.Fprintf(&b, "pgbouncer restarted after exiting on its own: %d times\n", bouncer.Restarts())
		fmt.Fprintf(&b, "pgbouncer log:\n%s\n", bouncer.LogTail(6000))
	}
	for _, p := range procs {
		fmt.Fprintf(&b, "worker %s:\n%s\n", p.ID, tail(p.Out.String()))
		if stacks := goroutines(p); stacks != "" {
			fmt.Fprintf(&b, "goroutines of worker %s:\n%s\n", p.ID, stacks)
		}
	}
	return b.String()
}

// Around a worker's goroutine dump (SIGUSR1) in its output.
const (
	goroutinesBegin = "=== goroutines"
	goroutinesEnd   = "=== end of goroutines"
)

// goroutines asks a worker for its goroutines' stacks and returns them;
// "" if it has exited or does not answer within 5 seconds.
func goroutines(p *proc) string {
	if p.Exited() {
		return ""
	}
	before := len(p.Out.String())
	p.Cmd.Process.Signal(syscall.SIGUSR1)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !p.Exited(); {
		out := p.Out.String()[before:]
		if i, j := strings.Index(out, goroutinesBegin), strings.Index(out, goroutinesEnd); i >= 0 && j > i {
			return out[i+len(goroutinesBegin)+1 : j]
		}
		time.Sleep(10 * time.Millisecond) // polling another process's output
	}
	return ""
}
