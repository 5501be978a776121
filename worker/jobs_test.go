package worker

// Each guard and background job on its own, on a real schema: what it does
// to the rows and to the handlers, not when its loop runs it.

import (
	"context"
	"errors"
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
	})
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
		queries: b.queries, pool: b.pool, workerID: "w1", lease: 300 * time.Millisecond, // renews every 100 ms
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
