package worker

// Each guard and background job on its own, on a real schema: what it does
// to the rows and to the handlers, not when its loop runs it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/control"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/queue"
)

type jobsBundle struct {
	pool    *pgxpool.Pool
	queries *db.Queries
	client  *queue.Client
	schema  queue.SchemaInfo
	log     *slog.Logger
}

func setupJobs(t *testing.T) *jobsBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	info, err := queue.ReadSchema(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return &jobsBundle{pool: pool, queries: db.New(), client: queue.New(pool), schema: info,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// deps returns what a guard of worker id in mode needs; running and cancel
// may be nil.
func (b *jobsBundle) deps(t *testing.T, id string, mode Mode, running func() []*execution, cancel func(*execution, error)) guardDeps {
	t.Helper()
	cfg, err := Config{WorkerID: id, Mode: mode, Logger: b.log}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if running == nil {
		running = func() []*execution { return nil }
	}
	if cancel == nil {
		cancel = func(*execution, error) {}
	}
	return guardDeps{
		pool: b.pool, queries: b.queries, cfg: cfg, log: b.log,
		row:     workerRow{queries: b.queries, id: id, host: "test", pid: 1, queues: cfg.Queues},
		running: running, cancel: cancel, wakeAll: func() {},
	}
}

// claim enqueues n tasks and claims them through g.
func (b *jobsBundle) claim(t *testing.T, g guard, id string, n int) []db.TaskClaimRow {
	t.Helper()
	rows, _ := b.claimGen(t, g, id, n)
	return rows
}

// claimGen is claim, with the generation that guards the tasks.
func (b *jobsBundle) claimGen(t *testing.T, g guard, id string, n int) ([]db.TaskClaimRow, uint64) {
	t.Helper()
	ctx := context.Background()
	for range n {
		if _, err := b.client.Enqueue(ctx, "job", nil); err != nil {
			t.Fatal(err)
		}
	}
	rows, gen, err := g.claim(db.TaskClaimParams{
		WorkerID: id, Queue: queue.DefaultQueue, OnlyNames: []string{}, SkipNames: []string{}, Max: int32(n),
		ExclusiveSeed: b.schema.TableOID,
	}, false)
	if err != nil || len(rows) != n {
		t.Fatalf("claimed %d of %d tasks: %v", len(rows), n, err)
	}
	return rows, gen
}

func (b *jobsBundle) status(t *testing.T, id int64) string {
	t.Helper()
	var s string
	if err := b.pool.QueryRow(context.Background(), "SELECT status FROM skiplock_tasks WHERE id = $1", id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *jobsBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

func executionOf(r db.TaskClaimRow) *execution {
	return &execution{task: queueTask(r)}
}

// waitFor receives from ch, or fails after a patient deadline.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(pgtest.Patient(time.Second)):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

type rescueCounter struct {
	NopObserver
	rescued atomic.Int64
}

func (o *rescueCounter) Rescued(string, string) { o.rescued.Add(1) }

func TestAdvisoryGuardLocksUntilRelease(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	g := newGuard(b.deps(t, "w1", ModeAdvisory, nil, nil))
	if err := g.open(ctx, b.schema.TableOID, &outage{log: b.log, what: "test"}); err != nil {
		t.Fatal(err)
	}
	defer g.close()
	rows, gen := b.claimGen(t, g, "w1", 2)
	locks := func() int {
		var n int
		err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND objsubid = 2 AND granted AND classid::bigint = $1`, b.schema.TableOID).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := locks(); n != 2 {
		t.Fatalf("%d task locks held after claiming 2", n)
	}
	// Released locks go with the next claim.
	g.release([]finish{{id: rows[0].ID, gen: gen}, {id: rows[1].ID, gen: gen}})
	b.claim(t, g, "w1", 1)
	if n := locks(); n != 1 {
		t.Fatalf("%d task locks held after releasing 2 of 3", n)
	}
}

func TestLeaseGuardElectsOneLeader(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	g1, g2 := newGuard(b.deps(t, "w1", ModeLease, nil, nil)), newGuard(b.deps(t, "w2", ModeLease, nil, nil))
	e1 := newElector(rescuerJob, g1, b.log, "w1")
	e2 := newElector(rescuerJob, g2, b.log, "w2")
	if !e1.lead(ctx) || e2.lead(ctx) {
		t.Fatalf("first candidate leads: %v, second leads: %v; want only the first", e1.isLeader(), e2.isLeader())
	}
	if !e1.lead(ctx) {
		t.Fatal("the leader lost its leadership on renewal")
	}
	g1.resign(electedJobs)
	if !e2.lead(ctx) {
		t.Fatal("the second candidate did not take over after the leader resigned")
	}
}

func TestRescuerReturnsExpiredLeases(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	g := newGuard(b.deps(t, "w1", ModeLease, nil, nil))
	rows := b.claim(t, g, "w1", 2)
	b.exec(t, "UPDATE skiplock_tasks SET locked_until = now() - interval '1 second' WHERE id = $1", rows[0].ID)
	obs := &rescueCounter{}
	work, _ := queue.Channels(b.schema.Name)
	r := &rescuer{
		queries: b.queries, pool: b.pool, classOID: b.schema.TableOID, channel: work,
		beforeRescue: g.beforeRescue, observer: obs, log: b.log,
	}
	r.rescue(context.Background())
	if s := b.status(t, rows[0].ID); s != "pending" {
		t.Errorf("task with an expired lease is %s, want pending", s)
	}
	if s := b.status(t, rows[1].ID); s != "running" {
		t.Errorf("task with a live lease is %s, want running", s)
	}
	if n := obs.rescued.Load(); n != 1 {
		t.Errorf("observer saw %d rescues, want 1", n)
	}
}

func TestRetirerKeepsWhatRetentionSays(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	g := newGuard(b.deps(t, "w1", ModeLease, nil, nil))
	rows := b.claim(t, g, "w1", 3)
	b.exec(t, "UPDATE skiplock_tasks SET status = 'completed', finished_at = now() - interval '1 hour' WHERE id = $1", rows[0].ID)
	b.exec(t, "UPDATE skiplock_tasks SET status = 'completed', finished_at = now() WHERE id = $1", rows[1].ID)
	b.exec(t, "UPDATE skiplock_tasks SET status = 'failed', finished_at = now() - interval '1 hour' WHERE id = $1", rows[2].ID)
	r := newRetirer(Config{RetainCompleted: time.Minute, RetainFailed: -1, RetainCancelled: -1}, func() bool { return true }, b.queries, b.pool, b.log)
	if got := r.every(); got != 30*time.Second {
		t.Errorf("retires every %s with a 1m retention, want 30s", got)
	}
	r.retire(context.Background())
	var left []int64
	if err := b.pool.QueryRow(context.Background(), "SELECT array_agg(id ORDER BY id) FROM skiplock_tasks").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] != rows[1].ID || left[1] != rows[2].ID {
		t.Errorf("tasks left %v, want the recent completed one and the failed one kept forever: %d, %d", left, rows[1].ID, rows[2].ID)
	}
}

func TestLeaseRenewerCancelsLostTasks(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	g := newGuard(b.deps(t, "w1", ModeLease, nil, nil))
	rows := b.claim(t, g, "w1", 2)
	kept, lost := executionOf(rows[0]), executionOf(rows[1])
	// Rescued from under this worker: its lease can no longer be renewed.
	b.exec(t, "UPDATE skiplock_tasks SET status = 'pending', worker_id = NULL, locked_until = NULL WHERE id = $1", rows[1].ID)
	b.exec(t, "UPDATE skiplock_tasks SET locked_until = '2000-01-01' WHERE id = $1", rows[0].ID)
	type cancelled struct {
		e     *execution
		cause error
	}
	cancels := make(chan cancelled, 2)
	r := &leaseRenewer{
		// Renews every second, each renewal given a second: at 300 ms, a
		// -count=3 run beside other test runs (load 32) had renewals time
		// out for a whole lease, and the renewer rightly cancelled both.
		queries: b.queries, pool: b.pool, workerID: "w1", lease: 3 * time.Second,
		running: func() []*execution { return []*execution{kept, lost} },
		cancel: func(e *execution, cause error) {
			select {
			case cancels <- cancelled{e, cause}:
			default: // cancelled again on a later pass
			}
		},
		observer: NopObserver{}, log: b.log,
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go r.run(ctx)
	c := waitFor(t, cancels, "the lost task's cancellation")
	if c.e != lost || !errors.Is(c.cause, errLockLost) {
		t.Fatalf("cancelled task %d with %v, want task %d with errLockLost", c.e.task.ID, c.cause, lost.task.ID)
	}
	var renewed bool
	if err := b.pool.QueryRow(context.Background(), "SELECT locked_until > '2001-01-01' FROM skiplock_tasks WHERE id = $1", rows[0].ID).Scan(&renewed); err != nil {
		t.Fatal(err)
	}
	if !renewed {
		t.Error("the kept task's lease was not renewed")
	}
}

func TestCancelPollerFindsRequests(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	g := newGuard(b.deps(t, "w1", ModeLease, nil, nil))
	rows := b.claim(t, g, "w1", 2)
	if _, err := b.client.CancelRunning(context.Background(), []int64{rows[1].ID}); err != nil {
		t.Fatal(err)
	}
	got := make(chan []int64, 1)
	p := &cancelPoller{
		queries: b.queries, pool: b.pool, interval: 50 * time.Millisecond,
		running: func() []*execution { return []*execution{executionOf(rows[0]), executionOf(rows[1])} },
		cancel: func(ids []int64) {
			select {
			case got <- ids:
			default:
			}
		},
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go p.run(ctx)
	if ids := waitFor(t, got, "the poller's cancellation"); len(ids) != 1 || ids[0] != rows[1].ID {
		t.Fatalf("poller cancelled %v, want [%d]", ids, rows[1].ID)
	}
}

func TestListenerHandsOverWorkAndCommands(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	work, ctl := queue.Channels(b.schema.Name)
	woken, commands := make(chan string, 10), make(chan string, 10)
	l := &listener{
		config: b.pool.Config().ConnConfig.Copy(), work: work, control: ctl,
		onWork: func(q string) { woken <- q }, onControl: func(msg string) { commands <- msg },
		onListen: func() {}, log: b.log, listening: make(chan struct{}),
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go l.run(ctx)
	waitFor(t, l.listening, "LISTEN")
	if err := b.client.ResumeQueue(context.Background(), "mail"); err != nil {
		t.Fatal(err)
	}
	if q := waitFor(t, woken, "a work notification"); q != "mail" {
		t.Errorf("woke queue %q, want mail", q)
	}
	g := newGuard(b.deps(t, "w1", ModeLease, nil, nil))
	rows := b.claim(t, g, "w1", 1)
	if _, err := b.client.CancelRunning(context.Background(), []int64{rows[0].ID}); err != nil {
		t.Fatal(err)
	}
	msg := waitFor(t, commands, "a cancel command")
	if id, ok := control.ParseCancel(msg); !ok || id != rows[0].ID {
		t.Errorf("command %q, want the cancellation of task %d", msg, rows[0].ID)
	}
}

func TestRowHeartbeat(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	row := workerRow{queries: b.queries, id: "w1", host: "test", pid: 1, queues: []string{"default"}}
	if err := row.register(ctx, b.pool, 0); err != nil {
		t.Fatal(err)
	}
	b.exec(t, "UPDATE skiplock_workers SET heartbeat_at = now() - interval '1 hour'")
	h := &rowHeartbeat{row: row, pool: b.pool, every: time.Second, log: b.log}
	if err := h.beat(ctx); err != nil {
		t.Fatal(err)
	}
	var fresh bool
	if err := b.pool.QueryRow(ctx, "SELECT heartbeat_at > now() - interval '1 minute' FROM skiplock_workers WHERE id = 'w1'").Scan(&fresh); err != nil {
		t.Fatal(err)
	}
	if !fresh {
		t.Error("heartbeat_at not moved forward")
	}
}

// openAdvisory opens the advisory guard of d, with a lock session of its
// own, until the test ends.
func (b *jobsBundle) openAdvisory(t *testing.T, d guardDeps) *advisoryGuard {
	t.Helper()
	g := newGuard(d).(*advisoryGuard)
	if err := g.open(context.Background(), b.schema.TableOID, &outage{log: b.log, what: "test"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.close)
	return g
}

// lockBackend is the server process of worker id's lock session, as its
// row in skiplock_workers says.
func (b *jobsBundle) lockBackend(t *testing.T, id string) int32 {
	t.Helper()
	var pid int32
	if err := b.pool.QueryRow(context.Background(), "SELECT lock_backend_pid FROM skiplock_workers WHERE id = $1", id).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// leaderBackends are the server processes holding job's election lock.
func (b *jobsBundle) leaderBackends(t *testing.T, job uint32) []int32 {
	t.Helper()
	var pids []int32
	err := b.pool.QueryRow(context.Background(), `SELECT coalesce(array_agg(pid), '{}') FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND objid = $1 AND granted AND classid::bigint = $2`,
		job, b.schema.TableOID).Scan(&pids)
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// TestAdvisoryElectorHandsOver: of two candidates on two lock sessions
// exactly one leads, and keeps leading while its session lives; once the
// server ends that session, the other takes over, and the first, back on a
// new session, does not take it back.
func TestAdvisoryElectorHandsOver(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	g1 := b.openAdvisory(t, b.deps(t, "w1", ModeAdvisory, nil, nil))
	g2 := b.openAdvisory(t, b.deps(t, "w2", ModeAdvisory, nil, nil))
	e1, e2 := newElector(rescuerJob, g1, b.log, "w1"), newElector(rescuerJob, g2, b.log, "w2")
	for range 3 {
		if !e1.lead(ctx) || e2.lead(ctx) {
			t.Fatalf("first candidate leads: %v, second leads: %v; want only the first", e1.isLeader(), e2.isLeader())
		}
	}
	first := b.lockBackend(t, "w1")
	if pids := b.leaderBackends(t, leaderJobRescuer); len(pids) != 1 || pids[0] != first {
		t.Fatalf("election lock held by backends %v, want the first candidate's %d", pids, first)
	}

	b.exec(t, "SELECT pg_terminate_backend($1)", first)
	pgtest.Eventually(t, time.Second, "the second candidate leading", func() bool { return e2.lead(ctx) })
	// In a worker the session's health job notices the loss; here a ping
	// does, and the session reconnects.
	if err := g1.ls.ping(0, nil); !errors.Is(err, errSessionDown) {
		t.Fatalf("ping of the ended session: %v, want errSessionDown", err)
	}
	pgtest.Eventually(t, time.Second, "the first candidate's session back", func() bool {
		gen, up := g1.ls.generation()
		return up && gen == 2
	})
	if e1.lead(ctx) || !e2.lead(ctx) {
		t.Fatalf("after the handover first leads: %v, second leads: %v; want only the second", e1.isLeader(), e2.isLeader())
	}
	if pids, second := b.leaderBackends(t, leaderJobRescuer), b.lockBackend(t, "w2"); len(pids) != 1 || pids[0] != second {
		t.Fatalf("election lock held by backends %v, want the second candidate's %d", pids, second)
	}
}

// sessionEvents is an Observer that passes on lock session events.
type sessionEvents struct {
	NopObserver
	lost        chan int // handlers cancelled
	reconnected chan struct{}
}

func (o *sessionEvents) LockSessionLost(cancelled int) {
	select {
	case o.lost <- cancelled:
	default:
	}
}

func (o *sessionEvents) LockSessionReconnected() {
	select {
	case o.reconnected <- struct{}{}:
	default:
	}
}

// TestSessionHealth: the health job alone keeps the worker's heartbeat
// fresh through the lock session, and notices when the server ends the
// session: it cancels the handlers of the tasks locked in it with
// errLockLost, reports the loss, and the session comes back registered
// under its new server process.
func TestSessionHealth(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	var held []*execution // set before the job starts
	cancels := make(chan error, 1)
	d := b.deps(t, "w1", ModeAdvisory, func() []*execution { return held }, func(e *execution, cause error) {
		select {
		case cancels <- cause:
		default:
		}
	})
	// An idle session is pinged every 20 ms; the heartbeat goes every
	// StaleAfter/5 = 500 ms.
	d.cfg.HealthInterval, d.cfg.PingTimeout, d.cfg.StaleAfter = 20*time.Millisecond, time.Second, 2500*time.Millisecond
	events := &sessionEvents{lost: make(chan int, 1), reconnected: make(chan struct{}, 1)}
	d.cfg.Observer = events
	g := b.openAdvisory(t, d)
	rows, gen := b.claimGen(t, g, "w1", 1)
	e := executionOf(rows[0])
	e.gen = gen
	held = []*execution{e}
	b.exec(t, "UPDATE skiplock_workers SET heartbeat_at = now() - interval '1 hour' WHERE id = 'w1'")

	jobs := g.jobs()
	if len(jobs) != 1 {
		t.Fatalf("advisory guard has %d jobs, want the session health alone", len(jobs))
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go jobs[0](ctx)

	pgtest.Eventually(t, time.Second, "a heartbeat through the lock session", func() bool {
		var fresh bool
		err := b.pool.QueryRow(ctx, "SELECT heartbeat_at > now() - interval '1 minute' FROM skiplock_workers WHERE id = 'w1'").Scan(&fresh)
		return err == nil && fresh
	})
	first := b.lockBackend(t, "w1")
	b.exec(t, "SELECT pg_terminate_backend($1)", first)
	if cause := waitFor(t, cancels, "the handler's cancellation"); !errors.Is(cause, errLockLost) {
		t.Fatalf("handler cancelled with %v, want errLockLost", cause)
	}
	if n := waitFor(t, events.lost, "the loss reported"); n != 1 {
		t.Errorf("loss reported with %d handlers cancelled, want 1", n)
	}
	waitFor(t, events.reconnected, "the session reconnected")
	if now := b.lockBackend(t, "w1"); now == first || now == 0 {
		t.Errorf("worker row names lock backend %d after reconnecting, want a new one (was %d)", now, first)
	}
}

// TestSchedulersEnqueueEachTickOnce: two schedulers that both believe they
// lead, on one clock that the test moves a minute at a time, enqueue every
// tick of each schedule exactly once.
func TestSchedulersEnqueueEachTickOnce(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	schedules, err := parseSchedules([]PeriodicTask{
		{Every: time.Minute, Name: "report"},
		{Cron: "*/5 * * * *", Name: "digest"},
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var passes [2]atomic.Int64
	for i := range passes {
		s := &scheduler{
			schedules: schedules, lead: func(context.Context) bool { return true },
			pool: b.pool, queries: b.queries, producer: b.client, now: now, every: 5 * time.Millisecond, log: b.log,
			passed: func() { passes[i].Add(1) },
		}
		go s.run(ctx)
	}
	// settle waits until each scheduler has made two more passes: the
	// second began after the clock last moved.
	settle := func() {
		t.Helper()
		for i := range passes {
			from := passes[i].Load()
			pgtest.Eventually(t, 500*time.Millisecond, fmt.Sprintf("two passes of scheduler %d", i), func() bool {
				return passes[i].Load() >= from+2
			})
		}
	}
	ticks := func(name string) []time.Time {
		t.Helper()
		var at []time.Time
		err := b.pool.QueryRow(ctx, "SELECT coalesce(array_agg(run_at ORDER BY run_at), '{}') FROM skiplock_tasks WHERE name = $1", name).Scan(&at)
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	settle() // a new schedule starts with its next tick
	if n := len(ticks("report")) + len(ticks("digest")); n != 0 {
		t.Fatalf("%d tasks enqueued before the first tick", n)
	}
	const minutes = 12
	for m := 1; m <= minutes; m++ {
		clock.Store(start.Add(time.Duration(m) * time.Minute).UnixNano())
		settle()
		if n := len(ticks("report")); n != m {
			t.Fatalf("at 12:%02d: %d report tasks enqueued, want %d", m, n, m)
		}
	}
	for name, every := range map[string]time.Duration{"report": time.Minute, "digest": 5 * time.Minute} {
		at := ticks(name)
		if want := int(minutes * time.Minute / every); len(at) != want {
			t.Errorf("%s: %d ticks enqueued, want %d: %v", name, len(at), want, at)
			continue
		}
		for i, tick := range at {
			if want := start.Add(time.Duration(i+1) * every); !tick.Equal(want) {
				t.Errorf("%s: tick %d runs at %s, want %s", name, i, tick.UTC(), want)
			}
		}
	}
}

// The retirer deletes a workflow's row once its tasks are all gone and it
// is past workflowGrace; a workflow with a task left, or a new one, stays.
func TestRetirerDeletesEmptyWorkflows(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	var gone, kept, young int64
	for _, w := range []struct {
		id  *int64
		age string
	}{{&gone, "1 hour"}, {&kept, "1 hour"}, {&young, "1 second"}} {
		if err := b.pool.QueryRow(context.Background(),
			"INSERT INTO skiplock_workflows (created_at) VALUES (now() - $1::interval) RETURNING id", w.age).Scan(w.id); err != nil {
			t.Fatal(err)
		}
	}
	b.exec(t, "INSERT INTO skiplock_tasks (name, workflow_id) VALUES ('step', $1)", kept)
	r := newRetirer(Config{RetainCompleted: -1, RetainFailed: -1, RetainCancelled: -1}, func() bool { return true }, b.queries, b.pool, b.log)
	r.retire(context.Background())
	var left []int64
	if err := b.pool.QueryRow(context.Background(), "SELECT array_agg(id ORDER BY id) FROM skiplock_workflows").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] != kept || left[1] != young {
		t.Errorf("workflows left %v, want %d (has a task) and %d (new)", left, kept, young)
	}
}
