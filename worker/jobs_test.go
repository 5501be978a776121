package worker

// Each guard and background job is tested on its own, on a real schema:
// what it does to the rows and to the handlers, not when its loop runs it.
// This file holds their shared setup and the guards' tests; each job's test
// stands beside it in the file named after the job's (rescue_test.go for
// rescue.go, and so on).

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

type jobsBundle struct {
	pool    *pgxpool.Pool
	queries *db.Queries
	client  *queue.Client
	schema  schema.Info
	log     *slog.Logger
}

func setupJobs(t *testing.T) *jobsBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	info, err := schema.Read(context.Background(), pool)
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
	rows, gen, _, err := g.claim(db.TaskClaimParams{
		WorkerID: id, Queue: queue.DefaultQueue, OnlyNames: []string{}, SkipNames: []string{}, Max: int32(n),
		ExclusiveSeed: b.schema.TableOID,
	}, howPlain, nil)
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
	e := &execution{claimed: derefTime(r.StartedAt)}
	setTask(&e.own.task, &r)
	e.task = &e.own.task
	return e
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
