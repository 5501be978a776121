// Package failover runs skiplock on a highly available PostgreSQL (a
// pg_auto_failover formation, internal/hapg) and fails the primary over
// while three worker processes (this test binary, re-executed in worker
// mode) work and producers enqueue.
//
// Every acknowledged enqueue is recorded in the test process, and every
// handler run in a file of its worker process: outside the database. After
// the run: every acknowledged task is present and completed; a task ran
// twice only if it was claimed on the old primary and running at the
// failover; every task's completion is its last claim's (no fenced worker
// completed it); no advisory lock is left; the lock class (the OID of
// skiplock_tasks) is the same on the new primary and its locks use it.
//
// Each test logs one line of figures that starts with "FAILOVER", for
// scripts: seconds from the loss of the old primary to the new one
// accepting writes, to the first claim there, and to the rescue of the
// last orphaned task, and throughput before and after.
//
// The long form repeats the failover, back and forth, five times per test:
//
//	go test -run TestFailover -v -timeout 60m ./internal/systemtest/failover -failover.long
package failover

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/hapg"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

var long = flag.Bool("failover.long", false, "fail over five times per test, with longer phases")

const (
	envWorker = "SKIPLOCK_FAILOVER_WORKER" // worker mode: the worker's ID
	envURL    = "SKIPLOCK_FAILOVER_URL"
	envLedger = "SKIPLOCK_FAILOVER_LEDGER" // the file of this worker's handler runs
	envMode   = "SKIPLOCK_FAILOVER_MODE"   // "lease": through PgBouncer, with leases
	envListen = "SKIPLOCK_FAILOVER_LISTEN" // lease mode: a direct URL for LISTEN
)

// lease is a lease-mode worker's lease on a task. A lease that lapses runs
// its task again, as lease mode promises, failover or not: renewals every
// third of it must get through. At 2 s, a run of the suite with -count=3
// beside three other test runs (load 32) saw two backlog tasks run twice
// 4 s before the failover, their outcome writes slower than the lease.
const lease = 5 * time.Second

func TestMain(m *testing.M) {
	if id := os.Getenv(envWorker); id != "" {
		if err := workerMain(id); err != nil {
			fmt.Fprintln(os.Stderr, "failover worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if commandPath != "" {
		os.RemoveAll(filepath.Dir(commandPath))
	}
	os.Exit(code)
}

// workerMain is one worker process. Its handler appends a line to the
// ledger when it starts and when it ends: "S|F task attempt worker unixnano
// port", port being that of the node its pool is on; a start adds when the
// handler was called and when the task was claimed (the server's clock, on
// this machine), both in Unix nanoseconds: the handler asks the pool for
// its port first, which may wait for a connection long after the claim.
func workerMain(id string) error {
	ledger, err := os.OpenFile(os.Getenv(envLedger), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer ledger.Close()
	record := func(kind string, t *worker.Task, port int, times ...time.Time) error {
		line := fmt.Sprintf("%s %d %d %s %d %d", kind, t.ID, t.Attempt, id, time.Now().UnixNano(), port)
		for _, at := range times {
			line += fmt.Sprintf(" %d", at.UnixNano())
		}
		// One write of one short line: O_APPEND keeps lines whole.
		_, err := fmt.Fprintln(ledger, line)
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(envURL))
	if err != nil {
		return err
	}
	defer pool.Close()
	handlers := worker.Handlers{"work": func(ctx context.Context, t *worker.Task) error {
		called := time.Now()
		// Which node the worker is on, as near the claim as a handler can
		// tell: the pool's connections follow the primary.
		var port int
		if err := pool.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
			return err
		}
		if err := record("S", t, port, called, t.StartedAt); err != nil {
			return err
		}
		select {
		case <-time.After(time.Duration(5+rand.IntN(45)) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return record("F", t, port)
	}}
	cfg := worker.Config{
		WorkerID:     id,
		Concurrency:  16,
		RetryBackoff: func(int) time.Duration { return 100 * time.Millisecond },
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if os.Getenv(envMode) == "lease" {
		cfg.Mode, cfg.LeaseDuration, cfg.ListenURL = worker.ModeLease, lease, os.Getenv(envListen)
	}
	return worker.New(pool, cfg).Run(ctx, handlers)
}

// TestFailoverPlanned: `pg_autoctl perform failover` mid-run.
func TestFailoverPlanned(t *testing.T) { runFailover(t, "advisory", "planned") }

// TestFailoverUnplanned: SIGKILL of the primary (its pg_autoctl and
// postgres, as the loss of its machine) mid-run.
func TestFailoverUnplanned(t *testing.T) { runFailover(t, "advisory", "unplanned") }

// TestFailoverLeasePgBouncer: lease-mode workers and producers through a
// PgBouncer in transaction mode in front of the formation, SIGKILL of the
// primary. PgBouncer 1.18 (Debian 12) has no target_session_attrs, and its
// host lists are round-robin, so it cannot find the primary by itself: the
// test re-points it at the new primary and reloads it once the monitor has
// promoted one, as an operator's (or a monitor notification hook's) script
// would. LISTEN goes over a direct multi-host connection.
func TestFailoverLeasePgBouncer(t *testing.T) { runFailover(t, "lease", "unplanned") }

// run is one handler run, from a worker's ledger.
type run struct {
	task     int64
	attempt  int
	worker   string
	start    time.Time
	finish   time.Time // zero: it never ended (cancelled)
	finished bool
	port     int // the node the worker's pool was on when the run started
	// called is when the handler was called, claimed when the task was
	// claimed for this run (zero in a ledger line without them).
	called, claimed time.Time
}

// String is the run as a failure message shows it.
func (x run) String() string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Format("15:04:05.000000")
	}
	end := "not finished"
	if x.finished {
		end = "finished " + at(x.finish)
	}
	return fmt.Sprintf("{attempt %d by %s on :%d: claimed %s, called %s, started %s, %s}",
		x.attempt, x.worker, x.port, at(x.claimed), at(x.called), at(x.start), end)
}

// began is when the run was under way from: its claim, whose advisory lock
// it lives by, or its start in a ledger line without the claim.
func (x run) began() time.Time {
	if x.claimed.IsZero() {
		return x.start
	}
	return x.claimed
}

type round struct {
	kind                 string
	loss, writable       time.Time
	oldNode, newNode     *hapg.Node
	orphans              map[int64]int // task -> attempt, running on the old primary at the failover
	repointed            time.Time     // lease mode: PgBouncer now points at the new primary
	firstClaim, lastSave time.Time
	// asyncUntil, if set: the old primary went on acknowledging commits,
	// without waiting for the standby, until then (see lostByFormation).
	asyncUntil time.Time
}

// until is when the round's switch was over: the new primary accepted
// writes, and the old one no longer did.
func (r *round) until() time.Time {
	if r.asyncUntil.After(r.writable) {
		return r.asyncUntil
	}
	return r.writable
}

// ack is an acknowledged enqueue: the task's ID and when Enqueue returned.
type ack struct {
	id int64
	at time.Time
}

// lostByFormation returns the IDs of the acknowledged tasks to check, and
// how many acknowledged tasks pg_auto_failover lost, which it leaves out.
//
// pg_auto_failover 2.0 (Debian 12) has a race in a planned failover
// (hapostgres/pg_auto_failover#774, fixed upstream by PR #1165): when the
// old primary's keeper reports "primary" after the monitor has moved the
// standby to prepare_promotion, the monitor's "no healthy standby in the
// quorum" rule reassigns the old primary wait_primary instead of draining.
// wait_primary turns synchronous replication off; the old primary goes on
// acknowledging commits the standby, then promoted, never gets, until the
// demote timeout demotes it. No client can keep such a commit: the test
// asserts that every acknowledged task missing from the new primary was
// acknowledged inside such a window, and fails for any other.
func lostByFormation(t *testing.T, ctx context.Context, pool *pgxpool.Pool, f *hapg.Formation, rs []*round, acked map[string]ack) ([]int64, int) {
	t.Helper()
	ids := make([]int64, 0, len(acked))
	for _, a := range acked {
		ids = append(ids, a.id)
	}
	rows, err := pool.Query(ctx, "SELECT id, payload #>> '{}' FROM skiplock_tasks WHERE id = ANY($1)", ids)
	if err != nil {
		t.Fatal(err)
	}
	payloads := map[int64]string{}
	for rows.Next() {
		var id int64
		var payload string
		if err := rows.Scan(&id, &payload); err != nil {
			t.Fatal(err)
		}
		payloads[id] = payload
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The windows in which an old primary acknowledged commits on its own.
	type window struct{ from, to time.Time }
	var windows []window
	for i, r := range rs {
		events, err := f.EventsSince(ctx, r.loss.Add(-time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var w window
		for _, e := range events {
			switch {
			case w.from.IsZero() && e.Node == r.oldNode.Name && e.Goal == "wait_primary" && e.At.Before(r.writable):
				w.from = e.At
			case !w.from.IsZero() && e.Node == r.oldNode.Name && e.Reported == "demoted":
				w.to = e.At
			}
			if !w.to.IsZero() {
				break
			}
		}
		if w.from.IsZero() {
			continue
		}
		if w.to.IsZero() {
			w.to = time.Now()
		}
		// Commits waiting for the standby when the old primary gave it up
		// are acknowledged as it applies wait_primary; clocks are the same
		// machine's.
		w.from, w.to = r.loss, w.to.Add(time.Second)
		r.asyncUntil = w.to
		t.Logf("round %d: the monitor reassigned the old primary %s wait_primary during the failover (pg_auto_failover#774): it acknowledged commits without the standby until it reported demoted, %s after the failover began",
			i, r.oldNode.Name, w.to.Sub(r.loss).Round(time.Millisecond))
		windows = append(windows, w)
	}
	var want []int64
	lost, unexplained := 0, 0
	for payload, a := range acked {
		if payloads[a.id] == payload {
			want = append(want, a.id)
			continue
		}
		explained := false
		for _, w := range windows {
			if a.at.After(w.from) && a.at.Before(w.to) {
				explained = true
			}
		}
		if explained {
			lost++
			continue
		}
		unexplained++
		if unexplained <= 5 {
			t.Errorf("task %d (%s), acknowledged at %s, is missing from the new primary, and no old primary was acknowledging commits on its own then",
				a.id, payload, a.at.Format("15:04:05.000"))
		}
	}
	if unexplained > 0 {
		events, _ := f.Events(ctx, 40)
		t.Fatalf("%d acknowledged tasks lost outside any window of asynchronous commits; monitor events:\n%s", unexplained, events)
	}
	if lost > 0 {
		t.Logf("pg_auto_failover lost %d acknowledged enqueues (pg_auto_failover#774); the %d others are checked", lost, len(want))
	}
	return want, lost
}

func runFailover(t *testing.T, mode, kind string) {
	rounds, before, after := 1, 4*time.Second, 6*time.Second
	if *long {
		rounds, before, after = 5, 15*time.Second, 15*time.Second
	}
	ctx := context.Background()
	opts := hapg.Options{Log: os.Stderr}
	if kind == "unplanned" {
		// The old primary is dead, not cut off: no need to wait 30s in
		// case it still accepts writes (see hapg.Options.DemoteTimeout).
		opts.DemoteTimeout = 3 * time.Second
	}
	f, err := hapg.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	admin, err := pgxpool.New(ctx, f.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := migrations.Up(ctx, admin); err != nil {
		t.Fatal(err)
	}
	var classOID uint32
	if err := admin.QueryRow(ctx, "SELECT 'skiplock_tasks'::regclass::oid").Scan(&classOID); err != nil {
		t.Fatal(err)
	}

	workerURL, producerURL := f.URL(), f.URL()
	var bouncer *pgtest.Bouncer
	if mode == "lease" {
		primary, err := f.Primary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bouncer = pgtest.StartPgBouncer(t, f.NodeURL(primary), "")
		workerURL, producerURL = bouncer.URL, bouncer.URL
	}

	// Producers: each acknowledged ID, with when it was acknowledged.
	producers, err := pgxpool.New(ctx, producerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer producers.Close()
	var ackMu sync.Mutex
	// By payload, unique to each enqueue: a task acknowledged by the old
	// primary and lost with it leaves its ID free for the new primary's
	// sequence to hand out again.
	acked := map[string]ack{}
	var enqueueErrors int
	client := queue.New(producers)
	backlog := make([]queue.NewTask, 1000)
	for i := range backlog {
		backlog[i] = queue.NewTask{Name: "work", Payload: fmt.Sprintf("backlog-%d", i)}
	}
	ids, err := client.EnqueueMany(ctx, backlog)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		acked[backlog[i].Payload.(string)] = ack{id.ID, time.Now()}
	}
	stopProducers := make(chan struct{})
	var producing sync.WaitGroup
	for p := range 3 {
		producing.Add(1)
		go func() {
			defer producing.Done()
			for i := 0; ; i++ {
				select {
				case <-stopProducers:
					return
				default:
				}
				ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
				payload := fmt.Sprintf("p%d-%d", p, i)
				id, err := client.Enqueue(ectx, "work", payload)
				cancel()
				ackMu.Lock()
				if err == nil {
					acked[payload] = ack{id.ID, time.Now()}
				} else {
					enqueueErrors++
				}
				ackMu.Unlock()
				if err != nil {
					// Not a wait for a condition: a pause between attempts
					// while the database is away.
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	defer func() {
		select {
		case <-stopProducers:
		default:
			close(stopProducers)
		}
		producing.Wait()
	}()

	// Worker processes.
	dir := t.TempDir()
	type proc struct {
		id   string
		cmd  *exec.Cmd
		out  *bytes.Buffer
		done chan error
	}
	var procs []*proc
	for i := range 3 {
		id := fmt.Sprintf("failover-w%d", i)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorker+"="+id, envURL+"="+workerURL, envLedger+"="+filepath.Join(dir, id+".ledger"),
			envMode+"="+mode, envListen+"="+f.URL())
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{id: id, cmd: cmd, out: out, done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait() }()
		procs = append(procs, p)
	}
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Kill()
		}
	}()
	exitedEarly := func() {
		t.Helper()
		for _, p := range procs {
			select {
			case err := <-p.done:
				t.Fatalf("worker %s exited during the run (%v); a worker must outlive a failover:\n%s", p.id, err, tail(p.out.String()))
			default:
			}
		}
	}

	var rs []*round
	waitRuns := func(what string, enough func([]run) bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for !enough(readLedgers(t, dir)) {
			exitedEarly()
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: timed out after 3 minutes", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	finishedSince := func(since time.Time, n int) func([]run) bool {
		return func(runs []run) bool {
			c := 0
			for _, r := range runs {
				if r.finished && r.finish.After(since) {
					c++
				}
			}
			return c >= n
		}
	}
	began := time.Now()
	for i := range rounds {
		// Work under way before the failover, for the "before" throughput.
		phase := time.Now()
		waitRuns("work before the failover", finishedSince(phase, 200))
		time.Sleep(time.Until(phase.Add(before))) // the before-window: a duration, not a wait for a condition

		// Fail over only from a healthy formation: a primary whose standby
		// the monitor calls unhealthy (on a busy machine, a late report is
		// enough) stops waiting for it, and what it acknowledges then is
		// not on the standby.
		if err := f.WaitHealthy(ctx); err != nil {
			t.Fatal(err)
		}
		r := &round{kind: kind}
		r.oldNode, err = f.Primary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range f.Nodes {
			if n != r.oldNode {
				r.newNode = n
			}
		}
		r.loss = time.Now()
		if kind == "planned" {
			if err := f.Failover(ctx); err != nil {
				t.Fatal(err)
			}
		} else if err := f.Kill(r.oldNode); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		r.writable, err = f.WaitWritable(wctx, r.newNode)
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v\nmonitor log:\n%s\nnew primary's log:\n%s", i, err, f.Log(f.Monitor), f.Log(r.newNode))
		}
		if bouncer != nil {
			if err := bouncer.Repoint(f.NodeURL(r.newNode)); err != nil {
				t.Fatal(err)
			}
			r.repointed = time.Now()
		}
		// The orphans: tasks claimed on the old primary, running when the
		// new one took over. Their locks (or leases' renewals) died with it.
		r.orphans = map[int64]int{}
		rows, err := admin.Query(ctx, "SELECT id, attempt FROM skiplock_tasks WHERE status = 'running' AND started_at < $1", r.writable)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var attempt int
			if err := rows.Scan(&id, &attempt); err != nil {
				t.Fatal(err)
			}
			r.orphans[id] = attempt
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		checkLockClass(t, ctx, f, r.newNode, classOID, mode)
		checkConnections(t, ctx, f, r.newNode, mode, len(procs))
		rs = append(rs, r)
		if events, err := f.Events(ctx, 16); err == nil {
			t.Logf("round %d: monitor events:\n%s", i, events)
		}
		phase = time.Now()
		waitRuns("work after the failover", finishedSince(r.writable, 200))
		time.Sleep(time.Until(phase.Add(after))) // the after-window
		if kind == "unplanned" && i+1 < rounds {
			if err := f.Rejoin(r.oldNode); err != nil {
				t.Fatal(err)
			}
			if err := f.WaitHealthy(ctx); err != nil {
				t.Fatalf("%v\n%s", err, f.Log(r.oldNode))
			}
		}
	}
	close(stopProducers)
	producing.Wait()

	// Every acknowledged task completes, but those the formation itself
	// lost (see lostByFormation).
	ackMu.Lock()
	want, lost := lostByFormation(t, ctx, admin, f, rs, acked)
	ackMu.Unlock()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		exitedEarly()
		var done int
		err := admin.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE id = ANY($1) AND status = 'completed'", want).Scan(&done)
		if err == nil && done == len(want) {
			break
		}
		if time.Now().After(deadline) {
			var statuses string
			admin.QueryRow(ctx, `SELECT string_agg(s, ', ') FROM (SELECT status || ': ' || count(*) AS s FROM
				(SELECT coalesce(t.status::text, 'missing') AS status FROM unnest($1::bigint[]) AS a(id)
				 LEFT JOIN skiplock_tasks t ON t.id = a.id WHERE t.status IS DISTINCT FROM 'completed') x GROUP BY status) y`, want).Scan(&statuses)
			events, _ := f.Events(ctx, 40)
			t.Fatalf("%d of %d acknowledged tasks completed after 3 minutes (%v); the others: %s\nmonitor events:\n%s",
				done, len(want), err, statuses, events)
		}
		time.Sleep(100 * time.Millisecond)
	}
	workTime := time.Since(began)

	// Graceful stop: every worker exits 0.
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("worker %s exited with %v:\n%s", p.id, err, tail(p.out.String()))
			}
		case <-time.After(60 * time.Second):
			t.Errorf("worker %s did not stop on SIGTERM", p.id)
		}
	}

	losses := map[string][]time.Time{}
	for _, p := range procs {
		losses[p.id] = sessionLosses(p.out.String())
	}
	verify(t, ctx, admin, dir, want, rs, classOID, mode, losses)
	for _, p := range procs {
		logStateChanges(t, p.id, p.out.String())
	}
	if t.Failed() {
		// The lines themselves, with their times and task IDs, to set
		// beside the ledger's runs.
		for _, p := range procs {
			t.Logf("worker %s logged:\n%s", p.id, tailN(p.out.String(), 16000))
		}
	}
	t.Logf("%s mode, %s failover: %d acknowledged enqueues (%d enqueue errors during the failovers; %d lost by pg_auto_failover), %d rounds, %s",
		mode, kind, len(want)+lost, enqueueErrors, lost, rounds, workTime.Round(time.Millisecond))
}

// checkLockClass checks, while workers run on the new primary, that the
// lock class is the one they started with and that their task locks use
// it. Physical replication keeps OIDs, so it holds; a logical copy would
// not keep them, and workers would lock under a class no rescuer checks.
func checkLockClass(t *testing.T, ctx context.Context, f *hapg.Formation, n *hapg.Node, classOID uint32, mode string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, f.NodeURL(n))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var oid uint32
	if err := conn.QueryRow(ctx, "SELECT 'skiplock_tasks'::regclass::oid").Scan(&oid); err != nil {
		t.Fatal(err)
	}
	if oid != classOID {
		t.Fatalf("skiplock_tasks is OID %d on the new primary, %d on the old one: the lock class changed", oid, classOID)
	}
	if mode == "lease" {
		return
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var right, wrong int
		err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE classid = $1), count(*) FILTER (WHERE classid <> $1)
			FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2`, classOID).Scan(&right, &wrong)
		if err != nil {
			t.Fatal(err)
		}
		if wrong > 0 {
			t.Fatalf("%d task locks on the new primary use another class than skiplock_tasks' OID %d", wrong, classOID)
		}
		if right > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no task lock was taken on the new primary within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkConnections checks that every kind of connection skiplock opens
// found the new primary through the multi-host URL: each worker's lock
// session (advisory mode) and listener, and the CLI and the dashboard,
// started now with the formation's URL, whose first host may be the old
// primary (a standby now, or dead).
func checkConnections(t *testing.T, ctx context.Context, f *hapg.Formation, n *hapg.Node, mode string, workers int) {
	t.Helper()
	conn, err := pgx.Connect(ctx, f.NodeURL(n))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	want := map[string]int{"skiplock listener": workers}
	if mode != "lease" {
		want["skiplock lock session"] = workers // "skiplock lock session <worker id>"
	}
	deadline := time.Now().Add(time.Minute)
	for name, count := range want {
		for {
			var got int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 OR starts_with(application_name, $1 || ' ')", name).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got == count {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d connections named %q on the new primary a minute after the failover, want %d", got, name, count)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// The operator's view during an outage: the skiplock command, built
	// from this checkout (its own module, in the workspace), as a process.
	bin := skiplockCommand(t)
	cmdEnv := append(os.Environ(), "DATABASE_URL="+f.URL())
	stats := exec.CommandContext(ctx, bin, "stats")
	stats.Env = cmdEnv
	if out, err := stats.CombinedOutput(); err != nil {
		t.Fatalf("skiplock stats on %s: %v: %s", f.URL(), err, out)
	}

	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ui := exec.CommandContext(uctx, bin, "ui", "--listen", "127.0.0.1:0", "--refresh", "0")
	ui.Env = cmdEnv
	ui.Cancel = func() error { return ui.Process.Signal(os.Interrupt) }
	var uiErr strings.Builder
	ui.Stderr = &uiErr
	out, err := ui.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ui.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	go io.Copy(io.Discard, out)
	url := regexp.MustCompile(`http://\S+/`).FindString(line)
	if err != nil || url == "" {
		cancel()
		ui.Wait()
		t.Fatalf("skiplock ui printed %q (%v): %s", line, err, uiErr.String())
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url + "locks")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the dashboard's locks page answered %s after the failover", resp.Status)
	}
	cancel()
	if err := ui.Wait(); err != nil && uctx.Err() == nil {
		t.Errorf("skiplock ui: %v: %s", err, uiErr.String())
	}
}

var (
	commandOnce sync.Once
	commandPath string
	commandErr  error
)

// skiplockCommand builds cmd/skiplock once per test binary and returns its
// path. The command is a module of its own; go.work at the repository's
// root puts it in the same build as this checkout's library.
func skiplockCommand(t *testing.T) string {
	t.Helper()
	commandOnce.Do(func() {
		dir, err := os.MkdirTemp("", "skiplock-failover-cmd-")
		if err != nil {
			commandErr = err
			return
		}
		commandPath = filepath.Join(dir, "skiplock")
		build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", commandPath, "github.com/skiplock/skiplock/cmd/skiplock")
		if out, err := build.CombinedOutput(); err != nil {
			commandErr = fmt.Errorf("building the skiplock command: %v: %s", err, out)
		}
	})
	if commandErr != nil {
		t.Fatal(commandErr)
	}
	return commandPath
}

func readLedgers(t *testing.T, dir string) []run {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.ledger"))
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		task    int64
		attempt int
		worker  string
	}
	byKey := map[key]*run{}
	var runs []*run
	for _, name := range files {
		file, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) != 6 && len(fields) != 8 {
				continue // a line being written
			}
			port, _ := strconv.Atoi(fields[5])
			task, _ := strconv.ParseInt(fields[1], 10, 64)
			attempt, _ := strconv.Atoi(fields[2])
			nanos, _ := strconv.ParseInt(fields[4], 10, 64)
			k := key{task, attempt, fields[3]}
			switch fields[0] {
			case "S":
				r := &run{task: task, attempt: attempt, worker: fields[3], start: time.Unix(0, nanos), port: port}
				if len(fields) == 8 {
					called, _ := strconv.ParseInt(fields[6], 10, 64)
					claimed, _ := strconv.ParseInt(fields[7], 10, 64)
					r.called, r.claimed = time.Unix(0, called), time.Unix(0, claimed)
				}
				byKey[k] = r
				runs = append(runs, r)
			case "F":
				if r := byKey[k]; r != nil {
					r.finish, r.finished = time.Unix(0, nanos), true
				}
			}
		}
		file.Close()
	}
	out := make([]run, len(runs))
	for i, r := range runs {
		out[i] = *r
	}
	return out
}

func verify(t *testing.T, ctx context.Context, pool *pgxpool.Pool, dir string, acked []int64, rs []*round, classOID uint32, mode string, losses map[string][]time.Time) {
	t.Helper()
	runs := readLedgers(t, dir)
	byTask := map[int64][]run{}
	for _, r := range runs {
		byTask[r.task] = append(byTask[r.task], r)
	}

	// 0 lost: every acknowledged enqueue is there, completed.
	var present, completed int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'completed')
		FROM skiplock_tasks WHERE id = ANY($1)`, acked).Scan(&present, &completed); err != nil {
		t.Fatal(err)
	}
	if present != len(acked) || completed != len(acked) {
		t.Errorf("of %d acknowledged enqueues, %d are present and %d completed", len(acked), present, completed)
	}

	// discarded: a run the formation forgot, started on an old primary
	// while it acknowledged commits on its own (lostByFormation). Its
	// claim's attempt number may be handed out again, or never reach the
	// new primary.
	discarded := func(x run) bool {
		for _, r := range rs {
			if !r.asyncUntil.IsZero() && x.port == r.oldNode.Port && x.start.After(r.loss) && x.start.Before(r.asyncUntil) {
				return true
			}
		}
		return false
	}

	// No completion from a fenced worker: each task's completion is that of
	// its last claim, whose handler ran to the end, and no later claim ran.
	rows, err := pool.Query(ctx, "SELECT id, attempt, worker_id FROM skiplock_tasks WHERE status = 'completed'")
	if err != nil {
		t.Fatal(err)
	}
	type done struct {
		id      int64
		attempt int
		worker  string
	}
	completions, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (done, error) {
		var d done
		return d, r.Scan(&d.id, &d.attempt, &d.worker)
	})
	if err != nil {
		t.Fatal(err)
	}
	fenced := 0
	for _, d := range completions {
		ok := false
		for _, r := range byTask[d.id] {
			if r.attempt > d.attempt && !discarded(r) {
				ok = false
				break
			}
			if r.attempt == d.attempt && r.worker == d.worker && r.finished {
				ok = true
			}
		}
		if !ok {
			fenced++
			if fenced <= 5 {
				t.Errorf("task %d: completed as attempt %d by %s, which is not its last claim's finished run: %v", d.id, d.attempt, d.worker, byTask[d.id])
			}
		}
	}
	if fenced > 0 {
		t.Errorf("%d completions are not their last claim's", fenced)
	}

	// A task ran (to the end, or in part) more than once only if an earlier
	// run was under way at a failover: begun (claimed) before the new
	// primary accepted writes, and not finished before the old one was
	// lost, or finished so shortly before that its outcome, written in
	// batches, may not have been committed yet. "Accepted writes" is the
	// probe's synchronous commit; a claim commits asynchronously on the
	// lock session, so on the promoted node it may go through while the
	// formation still holds synchronous commits back, and its handler may
	// start seconds later, once the pool has a connection.
	const outcomeLag = 2 * time.Second
	atFailover := func(x run) *round {
		for _, r := range rs {
			if x.began().Before(r.until()) && (!x.finished || x.finish.After(r.loss.Add(-outcomeLag))) {
				return r
			}
		}
		return nil
	}
	// And however near a failover, a run is taken over only once the lock
	// session that claimed it is gone, or its worker gave up writing its
	// outcome and released it: its worker says so after the claim. (A
	// lease may lapse with its worker's sessions alive.)
	lostSince := func(worker string, claimed time.Time) bool {
		for _, at := range losses[worker] {
			// Log times are to the millisecond.
			if at.Add(time.Millisecond).After(claimed) {
				return true
			}
		}
		return false
	}
	twice, unexplained, takenLive := 0, 0, 0
	for id, rr := range byTask {
		if len(rr) < 2 {
			continue
		}
		twice++
		last := slices.MaxFunc(rr, func(a, b run) int { return a.attempt - b.attempt })
		counted := false
		for _, x := range rr {
			if x.attempt == last.attempt {
				continue
			}
			if atFailover(x) == nil && !counted {
				counted = true
				unexplained++
				if unexplained <= 5 {
					t.Errorf("task %d ran %d times, its attempt %d not at a failover: %v", id, len(rr), x.attempt, rr)
				}
			}
			if mode == "advisory" && !x.claimed.IsZero() && !lostSince(x.worker, x.claimed) {
				takenLive++
				if takenLive <= 5 {
					t.Errorf("task %d: its attempt %d was run again, though %s logged no lost lock session after claiming it at %s: %v",
						id, x.attempt, x.worker, x.claimed.Format("15:04:05.000000"), rr)
				}
			}
		}
	}
	if takenLive > 5 {
		t.Errorf("%d runs in all were run again with no lost lock session after their claim", takenLive)
	}

	// Nothing left: no running task, no advisory lock of the class.
	var running, locks int
	pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE status = 'running'").Scan(&running)
	pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1", classOID).Scan(&locks)
	if running != 0 {
		t.Errorf("%d tasks still running after every worker stopped", running)
	}
	if locks != 0 {
		t.Errorf("%d advisory locks of skiplock_tasks' class left after every worker stopped", locks)
	}

	// Figures, per round.
	load := loadAvg()
	for i, r := range rs {
		// The first claim on the new primary, by the node the run's worker
		// was on; and runs started on the old node after its loss (a
		// planned failover's old primary drains for a while).
		var firstClaim time.Time
		onOld, inSwitch := 0, 0
		for _, x := range runs {
			if x.port == r.newNode.Port && x.start.After(r.loss) && (firstClaim.IsZero() || x.start.Before(firstClaim)) {
				firstClaim = x.start
			}
			if x.port == r.oldNode.Port && x.start.After(r.loss) && x.start.Before(r.writable) {
				onOld++
			}
			// Claimed after the loss and before the probe's commit went
			// through (see atFailover).
			if x.claimed.After(r.loss) && x.claimed.Before(r.writable) {
				inSwitch++
			}
		}
		// An orphan (a run under way at the failover whose task was
		// claimed again) is resolved by its next claim: the rescue.
		var lastRescue time.Time
		rescued := 0
		for _, rr := range byTask {
			for _, x := range rr {
				if atFailover(x) != r {
					continue
				}
				var next time.Time
				for _, y := range rr {
					if y.attempt > x.attempt && (next.IsZero() || y.start.Before(next)) {
						next = y.start
					}
				}
				if !next.IsZero() {
					rescued++
					if next.After(lastRescue) {
						lastRescue = next
					}
				}
			}
		}
		ownOutcome := 0
		for id, attempt := range r.orphans {
			for _, x := range byTask[id] {
				if x.attempt == attempt && x.finished && len(byTask[id]) == 1 {
					ownOutcome++
				}
			}
		}
		window := 5 * time.Second
		rate := func(from time.Time) float64 {
			n := 0
			for _, x := range runs {
				if x.finished && !x.finish.Before(from) && x.finish.Before(from.Add(window)) {
					n++
				}
			}
			return float64(n) / window.Seconds()
		}
		secs := func(a, b time.Time) string {
			if a.IsZero() || b.IsZero() {
				return "NaN"
			}
			return fmt.Sprintf("%.2f", b.Sub(a).Seconds())
		}
		if firstClaim.IsZero() {
			t.Errorf("round %d: no claim on the new primary", i)
		}
		t.Logf("round %d: old primary lost at %s, new primary writable at %s", i, r.loss.Format("15:04:05.000"), r.writable.Format("15:04:05.000"))
		t.Logf("FAILOVER mode=%s kind=%s round=%d loss_to_writable_s=%s writable_to_first_claim_s=%s loss_to_first_claim_s=%s "+
			"running_at_writable=%d rescued=%d completed_by_own_worker=%d writable_to_last_rescue_s=%s loss_to_last_rescue_s=%s "+
			"writable_to_repoint_s=%s runs_started_on_old_after_loss=%d runs_claimed_before_writable=%d throughput_before_per_s=%.0f throughput_after_per_s=%.0f load1=%.2f",
			mode, r.kind, i, secs(r.loss, r.writable), secs(r.writable, firstClaim), secs(r.loss, firstClaim),
			len(r.orphans), rescued, ownOutcome, secs(r.writable, lastRescue), secs(r.loss, lastRescue),
			secs(r.writable, r.repointed), onOld, inSwitch, rate(r.loss.Add(-window)), rate(firstClaim), load)
	}
	t.Logf("%d handler runs for %d tasks; %d tasks ran more than once, all orphans of a failover (%d unexplained)",
		len(runs), len(completions), twice, unexplained)
}

// logStateChanges reports what each worker logged at warning level and
// above, message by message with counts: a failover should make a few lines
// per component, not one per failed attempt.
func logStateChanges(t *testing.T, id, out string) {
	counts := map[string]int{}
	var order []string
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		msg := line
		if _, rest, ok := strings.Cut(line, `msg="`); ok {
			msg, _, _ = strings.Cut(rest, `"`)
		}
		if counts[msg] == 0 {
			order = append(order, msg)
		}
		counts[msg]++
	}
	var b strings.Builder
	for _, m := range order {
		fmt.Fprintf(&b, "\n  %3d× %s", counts[m], m)
	}
	t.Logf("worker %s logged at warning level and above:%s", id, b.String())
}

// sessionLosses are the times at which a worker's log says it lost its lock
// session, or gave up writing outcomes and released their tasks' locks.
func sessionLosses(out string) []time.Time {
	var at []time.Time
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, `msg="skiplock: lock session lost`) &&
			!strings.Contains(line, `msg="skiplock: could not record task outcomes`) {
			continue
		}
		if v, ok := strings.CutPrefix(line, "time="); ok {
			v, _, _ = strings.Cut(v, " ")
			if when, err := time.Parse(time.RFC3339, v); err == nil {
				at = append(at, when)
			}
		}
	}
	return at
}

func loadAvg() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

func tail(s string) string { return tailN(s, 3000) }

func tailN(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// TestSessionLosses: the check that a run was taken over only after its
// lock session was lost reads the workers' logs as slog writes them.
func TestSessionLosses(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	log.Error("skiplock: lock session lost; cancelling its running tasks and reconnecting", "error", "unexpected EOF")
	log.Info("skiplock: lock session reconnected", "after", "13.5s")
	log.Error("skiplock: lock session lost; cancelling its running tasks and reconnecting", "error", "terminated")
	log.Warn("skiplock: outcomes discarded: their tasks were rescued from this worker after it lost its lock session", "count", 2)
	log.Error("skiplock: could not record task outcomes; their tasks will be rescued and run again", "count", 3)
	got := sessionLosses(logs.String())
	if len(got) != 3 {
		t.Fatalf("read %d losses, want 3, from:\n%s", len(got), logs.String())
	}
	for _, at := range got {
		if d := time.Since(at); d < 0 || d > time.Minute {
			t.Errorf("a loss read at %s, %s ago", at, d)
		}
	}
}
