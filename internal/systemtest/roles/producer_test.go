package roles

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TestProducerEnqueues: a producer role enqueues every way there is, from
// Go and from SQL: plain, in its own transaction, batches (COPY and
// INSERT), unique keys and their duplicates, a workflow, a task that
// depends on existing tasks, a sequence, and the SQL functions (also
// called schema-qualified from another search_path).
func TestProducerEnqueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	role, pool := b.as(t, migrations.Producer)
	c := queue.New(pool)

	first, err := c.Enqueue(ctx, "plain", map[string]int{"n": 1})
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	u1, err := c.Enqueue(ctx, "unique", nil, queue.WithUniqueKey("u1"))
	if err != nil {
		t.Fatalf("Enqueue with a unique key: %v", err)
	}
	if res, err := c.Enqueue(ctx, "unique", nil, queue.WithUniqueKey("u1")); err != nil || !res.Duplicate || res.ID != u1.ID {
		t.Fatalf("second Enqueue of unique key u1: %+v, %v; want a duplicate of %d", res, err, u1.ID)
	}
	if _, err := c.Enqueue(ctx, "unique", nil, queue.WithUniqueKey("u1"), queue.WithDuplicateError()); !errors.Is(err, queue.ErrDuplicate) {
		t.Fatalf("third Enqueue of unique key u1, WithDuplicateError: %v, want ErrDuplicate", err)
	}
	if _, err := c.Enqueue(ctx, "windowed", nil, queue.WithUnique(), queue.WithUniqueWindow(time.Hour)); err != nil {
		t.Fatalf("Enqueue with a unique window: %v", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueTx(ctx, tx, "in-tx", nil); err != nil {
		t.Fatalf("EnqueueTx: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Without keys a batch is written with COPY, with IDs reserved from
	// the identity's sequence; with a unique key, by INSERT.
	if ids, err := c.EnqueueMany(ctx, []queue.NewTask{{Name: "batch"}, {Name: "batch"}, {Name: "batch"}}); err != nil || len(ids) != 3 {
		t.Fatalf("EnqueueMany (COPY): %v, %v", ids, err)
	}
	if ids, err := c.EnqueueMany(ctx, []queue.NewTask{{Name: "batch"}, {Name: "batch", Options: []queue.Option{queue.WithUniqueKey("u2")}}}); err != nil || len(ids) != 2 {
		t.Fatalf("EnqueueMany (INSERT): %v, %v", ids, err)
	}
	wf, err := c.EnqueueWorkflow(ctx, queue.Workflow{Name: "wf", Steps: []queue.Step{
		{Name: "a"}, {Name: "b", DependsOn: []string{"a"}}, {Name: "c", DependsOn: []string{"a", "b"}},
	}})
	if err != nil || len(wf.TaskIDs) != 3 {
		t.Fatalf("EnqueueWorkflow: %+v, %v", wf, err)
	}
	// A dependent of tasks already enqueued is recorded on them, under
	// their row locks.
	if _, err := c.Enqueue(ctx, "after", nil, queue.WithDependsOn(first.ID, wf.TaskIDs["c"])); err != nil {
		t.Fatalf("Enqueue WithDependsOn: %v", err)
	}
	for range 2 {
		if _, err := c.Enqueue(ctx, "sequenced", nil, queue.WithSequence("s1")); err != nil {
			t.Fatalf("Enqueue WithSequence: %v", err)
		}
	}

	// A producer may read the schema's version, to check it is ready.
	if info, err := ops.Schema(ctx, c); err != nil || info.Version != migrations.Latest {
		t.Fatalf("ops.Schema: %+v, %v", info, err)
	}

	// The SQL functions.
	var id int64
	if err := pool.QueryRow(ctx, `SELECT skiplock_enqueue('sql', '{"n": 1}', sequence_key => 's2')`).Scan(&id); err != nil {
		t.Fatalf("skiplock_enqueue: %v", err)
	}
	var dup bool
	for i, want := range []bool{false, true} {
		if err := pool.QueryRow(ctx, `SELECT duplicate FROM skiplock_enqueue_task('sql', unique_key => 'u3')`).Scan(&dup); err != nil || dup != want {
			t.Fatalf("skiplock_enqueue_task #%d: duplicate %v, %v; want %v", i+1, dup, err, want)
		}
	}
	var n int
	err = pool.QueryRow(ctx, `SELECT count(*) FROM skiplock_enqueue_many('[{"name": "sql"}, {"name": "sql", "sequence_key": "s2"}]')`).Scan(&n)
	if err != nil || n != 2 {
		t.Fatalf("skiplock_enqueue_many: %d rows, %v", n, err)
	}
	// Schema-qualified, from a session whose search_path does not name
	// skiplock's schema: the functions find their tables all the same.
	cfg := pgtest.ConfigAs(t, b.schema, role)
	cfg.ConnConfig.RuntimeParams["search_path"] = "pg_catalog"
	other := pgtest.PoolFromConfig(t, cfg)
	if err := other.QueryRow(ctx, "SELECT "+pgx.Identifier{b.schema}.Sanitize()+".skiplock_enqueue('qualified')").Scan(&id); err != nil {
		t.Fatalf("schema-qualified skiplock_enqueue from another search_path: %v", err)
	}

	for _, c := range []struct {
		where string
		want  int
	}{
		{"true", 20},
		{"status = 'pending'", 15},
		{"status = 'waiting'", 5}, // b, c, after; the second of s1 and of s2
		{"name = 'unique'", 1},
		{"name = 'sql'", 4},
		{"name = 'qualified'", 1},
	} {
		if got := b.count(t, c.where); got != c.want {
			t.Errorf("tasks where %s: %d, want %d", c.where, got, c.want)
		}
	}
}

// TestProducerCannotChange: a producer may not change or delete tasks, nor
// anything else (pause a queue, set a limit), through the Go API or in
// SQL; an observer may not even enqueue. Each refusal is one readable
// permission error, and nothing changes.
func TestProducerCannotChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	failed := pgtest.InsertTask(t, b.admin, "default", "job", "failed", 1, 1, `[{"attempt":1,"outcome":"error","error":"boom"}]`)
	pending, err := b.client.Enqueue(ctx, "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := b.snapshot(t)

	for _, kind := range []migrations.RoleKind{migrations.Producer, migrations.Observer} {
		_, pool := b.as(t, kind)
		c := queue.New(pool)
		who := string(kind) + ": "
		_, err := c.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{IDs: []int64{pending.ID}}})
		wantDenied(t, who+"Cancel", err)
		_, err = c.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{IDs: []int64{failed}}})
		wantDenied(t, who+"Requeue", err)
		_, err = c.Delete(ctx, []int64{failed})
		wantDenied(t, who+"Delete", err)
		_, err = c.Purge(ctx, queue.PurgeRequest{Filter: queue.Filter{FinishedBefore: time.Now().Add(time.Hour)}})
		wantDenied(t, who+"Purge", err)
		_, err = c.RunNow(ctx, []int64{pending.ID})
		wantDenied(t, who+"RunNow", err)
		wantDenied(t, who+"PauseQueue", c.PauseQueue(ctx, "default"))
		wantDenied(t, who+"SetLimit", c.SetLimit(ctx, queue.Limit{Queue: "default", Max: 1}))
		for _, stmt := range []string{
			"UPDATE skiplock_tasks SET status = 'cancelled'",
			"UPDATE skiplock_tasks SET payload = '1'",
			"DELETE FROM skiplock_tasks",
			"TRUNCATE skiplock_tasks",
			"UPDATE skiplock_workflows SET name = 'x'",
			"INSERT INTO skiplock_queues (name, paused_at) VALUES ('default', now())",
		} {
			_, err := pgerr.Interpreting(pool).Exec(ctx, stmt)
			wantDenied(t, who+stmt, err)
		}
		if kind == migrations.Observer {
			_, err := c.Enqueue(ctx, "job", nil)
			wantDenied(t, who+"Enqueue", err)
			_, err = pgerr.Interpreting(pool).Exec(ctx, "SELECT skiplock_enqueue('job')")
			wantDenied(t, who+"skiplock_enqueue", err)
		}
	}
	if after := b.snapshot(t); after != before {
		t.Fatalf("refused changes changed the tables:\nbefore %s\nafter  %s", before, after)
	}
}

// TestRoleWithoutUsage: a role with no USAGE on the schema (PostgreSQL
// then leaves the schema out of its search_path) is told so, with the
// grant to run, by a worker's Run, by ops.Schema (the command's) and by Enqueue,
// rather than that the schema does not exist or is not migrated.
func TestRoleWithoutUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	role := pgtest.Role(t, b.schema, migrations.Observer)
	if _, err := b.admin.Exec(ctx, "REVOKE USAGE ON SCHEMA "+pgx.Identifier{b.schema}.Sanitize()+" FROM "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	pool := pgtest.PoolAs(t, b.schema, role)
	want := "has no USAGE on schema " + pgx.Identifier{b.schema}.Sanitize()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, queue.ErrPermissionDenied) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want queue.ErrPermissionDenied saying %q", what, err, want)
		}
	}
	_, err := ops.Schema(ctx, queue.New(pool))
	check("ops.Schema", err)
	_, err = queue.New(pool).Enqueue(ctx, "job", nil)
	check("Enqueue", err)
	err = worker.New(pool, worker.Config{}).Run(ctx, worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }})
	check("worker Run", err)
	if !errors.Is(err, queue.ErrPermissionDenied) {
		t.Errorf("worker Run: %v, want queue.ErrPermissionDenied", err)
	}
}
