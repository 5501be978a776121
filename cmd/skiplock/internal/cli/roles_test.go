package cli_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// as is the bundle's schema seen by the command as role.
func (b *bundle) as(t *testing.T, role string) *bundle {
	t.Helper()
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return &bundle{schema: b.schema, pool: b.pool, client: b.client, url: u.String()}
}

// denied checks a run refused for a missing grant: exit 1, one line that
// says what was denied and where the grants are.
func (r result) denied(t *testing.T, what string) {
	t.Helper()
	if r.code != 1 {
		t.Fatalf("%s: exit %d, want 1 (permission denied)\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
	}
	line := r.oneLine(t)
	if !strings.Contains(line, "permission denied for") || !strings.Contains(line, "skiplock migrate grants") {
		t.Fatalf("%s: %q does not say what is denied and where the grants are", what, line)
	}
}

func TestMigrateGrants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.run(t, "migrate", "grants", "--role", "app_worker", "--kind", "worker", "--schema", "jobs").ok(t)
	for _, want := range []string{
		`-- skiplock worker grants for role "app_worker" on schema "jobs"`,
		`GRANT USAGE ON SCHEMA "jobs" TO "app_worker";`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "jobs".skiplock_tasks TO "app_worker";`,
		`-- GRANT pg_signal_backend, pg_read_all_stats TO "app_worker";`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("grants lack %q:\n%s", want, r.stdout)
		}
	}
	// Without --schema: the search_path's, read from the database.
	var out struct {
		Schema     string   `json:"schema"`
		Kind       string   `json:"kind"`
		Statements []string `json:"statements"`
		Optional   []struct {
			SQL string `json:"sql"`
		} `json:"optional"`
	}
	b.run(t, "migrate", "grants", "--role", "app", "--kind", "producer", "--json").ok(t).decode(t, &out)
	if out.Schema != b.schema || out.Kind != "producer" || len(out.Statements) == 0 || len(out.Optional) != 0 {
		t.Fatalf("--json: %+v", out)
	}
	for _, args := range [][]string{
		{"--role", "app", "--kind", "admin", "--schema", "jobs"},
		{"--kind", "worker", "--schema", "jobs"},
		{"--role", "app", "--schema", "jobs"},
		{"--role", "app", "--kind", "worker", "--schema", ""},
	} {
		r := b.run(t, append([]string{"migrate", "grants"}, args...)...)
		if r.code != 2 || r.stdout != "" {
			t.Errorf("migrate grants %q: exit %d, stdout %q; want 2 and nothing", args, r.code, r.stdout)
			continue
		}
		if line := r.oneLine(t); args[3] == "admin" && !strings.Contains(line, `--kind must be producer, worker, observer or operator, got "admin"`) {
			t.Errorf("bad kind: %q", line)
		}
	}

	// As documented: the output, run as the schema's owner, lets a new
	// role do its work.
	role := pgtest.BareRole(t)
	ctx := context.Background()
	script := b.run(t, "migrate", "grants", "--role", role, "--kind", "observer").ok(t).stdout
	if _, err := b.pool.Exec(ctx, script); err != nil {
		t.Fatalf("running the printed grants: %v\n%s", err, script)
	}
	b.insert(t, "q", "job", queue.StatusFailed, 1, 1, "boom")
	if r := b.as(t, role).run(t, "list", "--status", "failed").ok(t); !strings.Contains(r.stdout, "boom") {
		t.Fatalf("list as the granted role:\n%s", r.stdout)
	}
}

// TestObserverCommands: an observer role runs every read command,
// including locks (pg_locks needs no grant; pg_stat_activity hides other
// roles' waits until pg_read_all_stats is granted), and every command
// that changes something is refused with one readable line, nothing
// changed.
func TestObserverCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	failed := b.insert(t, "q", "job", queue.StatusFailed, 1, 1, "boom")
	pending := b.insert(t, "q", "job", queue.StatusPending, 0, 3, "")
	running := b.insert(t, "q", "held", queue.StatusRunning, 1, 3, "")
	if _, err := b.pool.Exec(ctx, "UPDATE skiplock_tasks SET finished_at = now() - interval '2 hours' WHERE id = $1", failed); err != nil {
		t.Fatal(err) // old enough for the purge to try
	}
	wf, err := b.client.EnqueueWorkflow(ctx, queue.Workflow{Name: "wf", Steps: []queue.Step{{Name: "a"}, {Name: "b", DependsOn: []string{"a"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Enqueue(ctx, "seq", nil, queue.WithSequence("acct:7")); err != nil {
		t.Fatal(err)
	}
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: "q", Max: 2}); err != nil {
		t.Fatal(err)
	}
	if err := b.client.PauseQueue(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	// Another role's session holds the running task's lock and its row,
	// and a third session waits for the row.
	info, err := schema.Read(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	cfg := pgtest.Config(t, b.schema).ConnConfig
	cfg.RuntimeParams["application_name"] = "lock-holder"
	holder, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1::integer, $2::integer)", int32(uint32(info.TableOID)), int32(running)); err != nil {
		t.Fatal(err)
	}
	tx := pgtest.HoldTaskRow(t, holder, running)
	waiting := make(chan error, 1)
	go func() {
		_, err := b.pool.Exec(ctx, "UPDATE skiplock_tasks SET priority = 5 WHERE id = $1", running)
		waiting <- err
	}()
	defer func() {
		tx.Rollback(ctx)
		if err := <-waiting; err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, time.Second, "the UPDATE waiting for the row lock", func() bool {
		var n int
		err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%SET priority = 5%'`).Scan(&n)
		return err == nil && n == 1
	})

	role := pgtest.Role(t, b.schema, migrations.Observer)
	o := b.as(t, role)
	before := b.snapshot(t)
	id := strconv.FormatInt
	for _, args := range [][]string{
		{"list"},
		{"list", "--status", "failed", "--json"},
		{"show", id(failed, 10)},
		{"stats"},
		{"stats", "--json"},
		{"queue", "list"},
		{"limit", "list"},
		{"workflow", "show", id(wf.ID, 10)},
		{"sequence", "show", "acct:7"},
		{"migrate", "status"},
		{"locks"},
	} {
		r := o.run(t, args...)
		if r.code != 0 || strings.Contains(r.stdout+r.stderr, "permission denied") {
			t.Errorf("%q as observer: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
		}
	}

	type locksOut struct {
		Locks []struct {
			TaskID          int64  `json:"task_id"`
			ApplicationName string `json:"application_name"`
		} `json:"locks"`
		Waits []struct {
			Query string `json:"query"`
		} `json:"waits"`
	}
	var locks locksOut
	o.run(t, "locks", "--json").ok(t).decode(t, &locks)
	if len(locks.Locks) != 1 || locks.Locks[0].TaskID != running || locks.Locks[0].ApplicationName != "lock-holder" {
		t.Fatalf("observer's locks = %+v, want the running task's, held by lock-holder", locks.Locks)
	}
	if len(locks.Waits) != 0 {
		t.Fatalf("observer without pg_read_all_stats sees another role's wait: %+v", locks.Waits)
	}
	if _, err := b.pool.Exec(ctx, "GRANT pg_read_all_stats TO "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	locks = locksOut{}
	o.run(t, "locks", "--json").ok(t).decode(t, &locks)
	// The waits are the database's: other tests' schemas share it, and
	// their statements may wait at the same moment. This test's is the
	// UPDATE.
	ours := 0
	for _, w := range locks.Waits {
		if strings.Contains(w.Query, "SET priority = 5") {
			ours++
		}
	}
	if ours != 1 {
		t.Fatalf("observer with pg_read_all_stats: waits = %+v, want the UPDATE once", locks.Waits)
	}

	for _, args := range [][]string{
		{"requeue", id(failed, 10)},
		{"requeue", "--failed", "--yes"},
		{"cancel", id(pending, 10)},
		{"cancel", "--status", "pending", "--yes"},
		{"delete", id(failed, 10), "--yes"},
		{"purge", "--older-than", "1h", "--yes"},
		{"run-now", id(pending, 10)},
		{"queue", "pause", "q"},
		{"queue", "resume", "paused"},
		{"limit", "set", "--queue", "q", "--max", "5"},
		{"limit", "remove", "--queue", "q"},
		{"enqueue", "job"},
	} {
		o.run(t, args...).denied(t, strings.Join(args, " "))
	}
	if after := b.snapshot(t); after != before {
		t.Fatalf("the observer changed tasks:\nbefore %s\nafter  %s", before, after)
	}
	var paused, limits int
	if err := b.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM skiplock_queues WHERE paused_at IS NOT NULL), (SELECT count(*) FROM skiplock_limits WHERE max_running = 2)").Scan(&paused, &limits); err != nil || paused != 1 || limits != 1 {
		t.Fatalf("paused queues %d, limits %d (%v): the observer changed them", paused, limits, err)
	}
}

// TestOperatorCommands: an operator role requeues, cancels, runs now,
// deletes and purges tasks, pauses and resumes queues and sets and removes
// limits; it does not enqueue.
func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	failed := b.insert(t, "q", "job", queue.StatusFailed, 1, 1, "boom")
	pending := b.insert(t, "q", "job", queue.StatusPending, 0, 3, "")
	gone := b.insert(t, "q", "job", queue.StatusFailed, 1, 1, "boom")
	old := b.insert(t, "q", "job", queue.StatusCompleted, 1, 1, "")
	scheduled, err := b.client.Enqueue(ctx, "later", nil, queue.WithDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// A sequence's failed head that holds the rest: requeueing it asks
	// skiplock_sequence_admits, cancelling it releases the next.
	head, err := b.client.Enqueue(ctx, "seq", nil, queue.WithSequence("acct:7"), queue.WithSequenceHold())
	if err != nil {
		t.Fatal(err)
	}
	next, err := b.client.Enqueue(ctx, "seq", nil, queue.WithSequence("acct:7"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, "UPDATE skiplock_tasks SET status = 'failed', attempt = 1, finished_at = now() WHERE id = $1", head.ID); err != nil {
		t.Fatal(err)
	}

	op := b.as(t, pgtest.Role(t, b.schema, migrations.Operator))
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	for _, args := range [][]string{
		{"requeue", id(failed)},
		{"cancel", id(pending)},
		{"run-now", id(scheduled.ID)},
		{"delete", id(gone), "--yes"},
		{"purge", "--older-than", "0s", "--status", "completed", "--yes"},
		{"requeue", id(head.ID)},
		{"cancel", id(head.ID)},
		{"queue", "pause", "q"},
		{"queue", "resume", "q"},
		{"limit", "set", "--queue", "q", "--max", "2"},
		{"limit", "remove", "--queue", "q"},
		{"list"},
		{"stats"},
		{"locks"},
	} {
		if r := op.run(t, args...); r.code != 0 {
			t.Fatalf("%q as operator: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, c := range []struct {
		id   int64
		want queue.Status
	}{{failed, queue.StatusPending}, {pending, queue.StatusCancelled}, {head.ID, queue.StatusCancelled}, {next.ID, queue.StatusPending}} {
		if got := b.status(t, c.id); got != c.want {
			t.Errorf("task %d: %s, want %s", c.id, got, c.want)
		}
	}
	if task, err := b.client.Get(ctx, scheduled.ID); err != nil || task.RunAt.After(time.Now()) {
		t.Errorf("run-now: %+v, %v", task, err)
	}
	if n := b.count(t, "id = ANY($1)", []int64{gone, old}); n != 0 {
		t.Errorf("delete and purge left %d of their tasks", n)
	}
	op.run(t, "enqueue", "job").denied(t, "enqueue as operator")
}

// TestProducerCommands: a role given only what `migrate grants --kind
// producer` prints enqueues with the command, which records the enqueue in
// the audit trail as that role; it cannot read the trail nor rewrite a
// record of it, and changes nothing else.
func TestProducerCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	role := pgtest.BareRole(t)
	// A database that revokes EXECUTE from PUBLIC: the grants name what
	// a producer calls.
	script := "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA " + pgx.Identifier{b.schema}.Sanitize() + " FROM PUBLIC;\n" +
		b.run(t, "migrate", "grants", "--role", role, "--kind", "producer").ok(t).stdout
	if _, err := b.pool.Exec(ctx, script); err != nil {
		t.Fatalf("running the printed grants: %v\n%s", err, script)
	}
	p := b.as(t, role)
	var ids []int64
	for _, args := range [][]string{
		{"enqueue", "report.build", `{"n":1}`, "--queue", "reports"},
		{"enqueue", "sync.account", `{"id":7}`, "--unique-key", "sync:7"},
		{"enqueue", "ledger.post", `{"account":7}`, "--sequence", "account:7"},
		{"enqueue", "ledger.post", `{"account":7}`, "--sequence", "account:7"},
	} {
		r := p.run(t, args...)
		if r.code != 0 {
			t.Fatalf("%q as producer: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
		}
		id, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
		if err != nil {
			t.Fatalf("%q printed %q, want the task's ID", args, r.stdout)
		}
		ids = append(ids, id)
	}
	if n := b.count(t, "id = ANY($1)", ids); n != len(ids) {
		t.Fatalf("%d of the %d enqueued tasks exist", n, len(ids))
	}
	// Each enqueue's record, as the producer's role, from the command.
	rows, err := b.pool.Query(ctx, `SELECT (request->'ids'->>0)::bigint FROM skiplock_audit
		WHERE action = 'enqueue' AND source = 'cli' AND db_role = $1 AND affected = 1 AND finished_at IS NOT NULL ORDER BY id`, role)
	if err != nil {
		t.Fatal(err)
	}
	recorded, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(recorded, ids) {
		t.Fatalf("audit records of the producer's enqueues name tasks %v, want %v", recorded, ids)
	}

	// It appends, and no more.
	pool := pgtest.PoolAs(t, b.schema, role)
	for _, q := range []string{
		"SELECT count(*) FROM skiplock_audit",
		"UPDATE skiplock_audit SET actor = 'x'",
		"UPDATE skiplock_audit SET affected = 0",
		"DELETE FROM skiplock_audit",
	} {
		var pgErr *pgconn.PgError
		if _, err := pool.Exec(ctx, q); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s as producer: %v, want permission denied", q, err)
		}
	}
	for _, args := range [][]string{
		{"audit"},
		{"requeue", strconv.FormatInt(ids[0], 10)},
		{"cancel", strconv.FormatInt(ids[0], 10)},
		{"queue", "pause", "reports"},
	} {
		p.run(t, args...).denied(t, strings.Join(args, " "))
	}
	if s := b.status(t, ids[0]); s != queue.StatusPending {
		t.Fatalf("task %d is %s after the producer's refused changes, want pending", ids[0], s)
	}
}
