package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

type changeOut struct {
	Action  string  `json:"action"`
	DryRun  bool    `json:"dry_run"`
	Count   int64   `json:"count"`
	IDs     []int64 `json:"ids"`
	Skipped []struct {
		ID     int64  `json:"id"`
		Status string `json:"status"`
		Reason string `json:"reason"`
		OK     bool   `json:"ok"`
	} `json:"skipped"`
	Tasks []taskOut `json:"tasks"`
}

type taskOut struct {
	ID          int64           `json:"id"`
	Queue       string          `json:"queue"`
	Name        string          `json:"name"`
	Status      string          `json:"status"`
	Priority    int             `json:"priority"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	TimeoutMS   int64           `json:"timeout_ms"`
	Payload     json.RawMessage `json:"payload"`
	Metadata    json.RawMessage `json:"metadata"`
	RunAt       time.Time       `json:"run_at"`
	Attempts    []struct {
		Attempt int    `json:"attempt"`
		Outcome string `json:"outcome"`
		Error   string `json:"error"`
		Host    string `json:"host"`
		PID     int    `json:"pid"`
	} `json:"attempts"`
	Lock *struct {
		TaskID          int64  `json:"task_id"`
		PID             int    `json:"pid"`
		ApplicationName string `json:"application_name"`
		WorkerID        string `json:"worker_id"`
		WorkerHost      string `json:"worker_host"`
	} `json:"lock"`
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	b := setupSchema(t, pgtest.Schema(t, false))
	type status struct {
		Schema   string `json:"schema"`
		Version  uint   `json:"version"`
		Previous *uint  `json:"previous_version"`
		Latest   uint   `json:"latest"`
		UpToDate bool   `json:"up_to_date"`
	}
	tables := func() int {
		var n int
		err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables
			WHERE schemaname = $1 AND tablename LIKE 'skiplock\_%'`, b.schema).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	var s status
	b.run(t, "migrate", "status", "--json").ok(t).decode(t, &s)
	if s.Version != 0 || s.UpToDate || s.Latest != migrations.Latest {
		t.Fatalf("fresh status = %+v", s)
	}
	if n := tables(); n != 0 {
		t.Fatalf("status created %d tables", n)
	}
	if out := b.run(t, "migrate", "status").ok(t).stdout; !strings.Contains(out, "run skiplock migrate up") {
		t.Fatalf("status says %q", out)
	}

	// The search_path parameter of the URL is where the tables go.
	b.run(t, "migrate", "up", "--json").ok(t).decode(t, &s)
	if s.Schema != b.schema || s.Version != migrations.Latest || *s.Previous != 0 || !s.UpToDate {
		t.Fatalf("up = %+v", s)
	}
	if tables() == 0 {
		t.Fatalf("no tables in %s after migrate up", b.schema)
	}
	if out := b.run(t, "migrate", "up").ok(t).stdout; !strings.Contains(out, "Nothing to do") {
		t.Fatalf("second up says %q", out)
	}
	b.run(t, "enqueue", "kept").ok(t)

	// down drops data: it needs a yes.
	r := b.run(t, "migrate", "down")
	if r.code != cli.ExitError || !strings.Contains(r.oneLine(t), "--yes") {
		t.Fatalf("down without --yes: exit %d, %q", r.code, r.stderr)
	}
	r = b.runEnv(t, cli.Env{Interactive: true, Stdin: strings.NewReader("n\n")}, "migrate", "down")
	if r.code != cli.ExitError || !strings.Contains(r.stderr, "Drop skiplock's tables from schema "+b.schema+", deleting 1 task?") {
		t.Fatalf("down answered no: exit %d, %q", r.code, r.stderr)
	}
	if b.count(t, "true") != 1 {
		t.Fatal("down without confirmation dropped the task")
	}
	b.runEnv(t, cli.Env{Interactive: true, Stdin: strings.NewReader("yes\n")}, "migrate", "down").ok(t)
	if n := tables(); n > 1 { // golang-migrate's own version table stays
		t.Fatalf("%d tables left after down", n)
	}
	b.run(t, "migrate", "status", "--json").ok(t).decode(t, &s)
	if s.Version != 0 {
		t.Fatalf("status after down = %+v", s)
	}
	b.run(t, "migrate", "up").ok(t)
	b.run(t, "migrate", "down", "--yes").ok(t)
}

// TestMigrateDownSteps: --steps reverts the newest migrations only, with
// the confirmation rules of a full down, and keeps the tasks.
func TestMigrateDownSteps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	versions := migrations.Versions()
	prev := versions[len(versions)-2]
	b.run(t, "enqueue", "kept").ok(t)
	version := func() uint {
		t.Helper()
		var s struct {
			Version uint `json:"version"`
		}
		b.run(t, "migrate", "status", "--json").ok(t).decode(t, &s)
		return s.Version
	}

	r := b.run(t, "migrate", "down", "--steps", "1")
	if r.code != cli.ExitError || !strings.Contains(r.oneLine(t), "pass --yes") || version() != migrations.Latest {
		t.Fatalf("down --steps 1 without --yes: exit %d, %q, version %d", r.code, r.stderr, version())
	}
	r = b.runEnv(t, cli.Env{Interactive: true, Stdin: strings.NewReader("n\n")}, "migrate", "down", "--steps", "1")
	want := fmt.Sprintf("Revert schema %s from version %d to %d?", b.schema, migrations.Latest, prev)
	if r.code != cli.ExitError || !strings.Contains(r.stderr, want) || version() != migrations.Latest {
		t.Fatalf("down --steps 1 answered no: exit %d, %q, version %d", r.code, r.stderr, version())
	}
	out := b.runEnv(t, cli.Env{Interactive: true, Stdin: strings.NewReader("y\n")}, "migrate", "down", "--steps", "1").ok(t).stdout
	if want := fmt.Sprintf("Migrated schema %s down from version %d to %d.", b.schema, migrations.Latest, prev); !strings.Contains(out, want) || version() != prev {
		t.Fatalf("down --steps 1: %q, version %d; want %q", out, version(), want)
	}
	if n := len(versions) - 2; n > 0 {
		b.run(t, "migrate", "down", "--steps", fmt.Sprint(n), "--yes").ok(t)
		if v := version(); v != versions[0] {
			t.Fatalf("down --steps %d: version %d, want %d", n, v, versions[0])
		}
	}
	if b.count(t, "name = 'kept'") != 1 {
		t.Fatal("stepping down lost the task")
	}
	// The last step drops the tables: the question says so.
	r = b.run(t, "migrate", "down", "--steps", "1")
	if r.code != cli.ExitError || !strings.Contains(r.oneLine(t), "Drop skiplock's tables from schema "+b.schema+", deleting 1 task?") {
		t.Fatalf("last step without --yes: exit %d, %q", r.code, r.stderr)
	}
	b.run(t, "migrate", "up").ok(t)
	b.run(t, "migrate", "down", "--yes").ok(t) // without --steps: everything
	if v := version(); v != 0 {
		t.Fatalf("down without --steps: version %d", v)
	}
}

// TestMigrateSQL: what `migrate sql` prints, applied as another tool would
// (each range in one multi-statement transaction), takes a schema up in two
// steps to a version workers accept, and down again to nothing.
func TestMigrateSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupSchema(t, pgtest.Schema(t, false))
	apply := func(args ...string) string {
		t.Helper()
		sql := b.run(t, append([]string{"migrate", "sql"}, args...)...).ok(t).stdout
		if _, err := b.pool.Exec(ctx, sql); err != nil {
			t.Fatalf("applying migrate sql %q: %v", args, err)
		}
		return sql
	}
	headers := func(sql string) (out []string) {
		for _, line := range strings.Split(sql, "\n") {
			if strings.HasPrefix(line, "-- skiplock migration ") {
				out = append(out, line)
			}
		}
		return out
	}

	first := apply("--to", "4")
	want := []string{
		"-- skiplock migration 1 create_tasks, up (000001_create_tasks.up.sql)",
		"-- skiplock migration 2 flow_control, up (000002_flow_control.up.sql)",
		"-- skiplock migration 3 lease_mode, up (000003_lease_mode.up.sql)",
		"-- skiplock migration 4 autovacuum, up (000004_autovacuum.up.sql)",
	}
	if got := headers(first); !slices.Equal(got, want) {
		t.Fatalf("migrate sql --to 4 headers:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	rest := apply("up", "--from", "4")
	after4 := 0 // numbers may leave gaps
	for _, v := range migrations.Versions() {
		if v > 4 {
			after4++
		}
	}
	if got := headers(rest); len(got) != after4 || !strings.HasPrefix(got[0], "-- skiplock migration 5 ") {
		t.Fatalf("migrate sql up --from 4 headers: %q", got)
	}
	info, err := schema.Read(ctx, b.pool)
	if err != nil || info.Version != migrations.Latest || schema.Check(info) != nil {
		t.Fatalf("after migrate sql: %+v, %v, %v", info, err, schema.Check(info))
	}
	// skiplock's own runner leaves a schema another tool applied to it.
	if out := b.run(t, "migrate", "up").ok(t).stdout; !strings.Contains(out, "Nothing to do") {
		t.Fatalf("migrate up on a schema applied by another tool: %q", out)
	}
	if r := b.run(t, "migrate", "down", "--steps", "1", "--yes"); r.code != cli.ExitError || !strings.Contains(r.oneLine(t), "another tool applied the migrations") {
		t.Fatalf("migrate down on a schema applied by another tool: exit %d, %q", r.code, r.stderr)
	}
	// Upgrading a current schema: nothing to print, and no error.
	if r := b.run(t, "migrate", "sql", "--from", fmt.Sprint(migrations.Latest)).ok(t); r.stdout != "" || !strings.Contains(r.stderr, "nothing to print") {
		t.Fatalf("migrate sql --from latest: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	b.run(t, "enqueue", "x").ok(t)

	var files []struct {
		Version   uint   `json:"version"`
		Direction string `json:"direction"`
		File      string `json:"file"`
		SQL       string `json:"sql"`
	}
	b.run(t, "migrate", "sql", "down", "--json").ok(t).decode(t, &files)
	if len(files) != len(migrations.Versions()) || files[0].Version != migrations.Latest || files[len(files)-1].Version != 1 {
		t.Fatalf("migrate sql down --json: %d files, first %+v", len(files), files[0])
	}
	for _, f := range files {
		if raw, _ := fs.ReadFile(migrations.FS(), f.File); f.Direction != "down" || string(raw) != f.SQL {
			t.Fatalf("migrate sql down --json: %s is not the embedded file", f.File)
		}
	}
	apply("down")
	var left int
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace)
		+ (SELECT count(*) FROM pg_proc WHERE pronamespace = $1::regnamespace)`, b.schema).Scan(&left); err != nil || left != 0 {
		t.Fatalf("after migrate sql down: %d objects left (%v)", left, err)
	}
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t)

	out := b.run(t, "enqueue", "email.send", `{"to":"ada@example.com"}`).ok(t).stdout
	var id int64
	if _, err := fmt.Sscan(out, &id); err != nil || id <= 0 {
		t.Fatalf("enqueue printed %q, want an ID", out)
	}
	task, err := b.client.Get(context.Background(), id)
	if err != nil || task.Name != "email.send" || string(task.Payload) != `{"to": "ada@example.com"}` || task.Queue != "default" {
		t.Fatalf("task = %+v, %v", task, err)
	}

	// Flags after the positional arguments; payload from stdin.
	var got taskOut
	b.runEnv(t, cli.Env{Stdin: strings.NewReader("  [1, 2]\n")}, "enqueue", "report.build", "-",
		"--queue", "reports", "--priority", "-3", "--max-attempts", "2", "--timeout", "90s",
		"--metadata", `{"trace":"t1"}`, "--run-at", "2030-01-02T03:04:05Z", "--json").ok(t).decode(t, &got)
	if got.Name != "report.build" || got.Queue != "reports" || got.Priority != -3 || got.MaxAttempts != 2 ||
		got.TimeoutMS != 90000 || compact(t, got.Payload) != "[1,2]" || compact(t, got.Metadata) != `{"trace":"t1"}` ||
		!got.RunAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) || got.Status != "scheduled" {
		t.Fatalf("enqueued %+v", got)
	}
	b.run(t, "enqueue", "later", "--delay", "1h", "--json").ok(t).decode(t, &got)
	if time.Until(got.RunAt) < 59*time.Minute || compact(t, got.Payload) != "null" {
		t.Fatalf("delayed task = %+v", got)
	}
}

func TestListAndShow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	failed := b.insert(t, "mail", "send", queue.StatusFailed, 3, 3, "smtp: 451 try later")
	b.insert(t, "mail", "send", queue.StatusCompleted, 1, 3, "")
	b.insert(t, "reports", "build", queue.StatusFailed, 1, 1, "out of memory")
	running := b.insert(t, "mail", "send", queue.StatusRunning, 2, 3, "first try failed")

	var tasks []taskOut
	b.run(t, "list", "--json").ok(t).decode(t, &tasks)
	if len(tasks) != 4 || tasks[0].ID != running {
		t.Fatalf("list = %+v", tasks)
	}
	b.run(t, "list", "--status", "failed", "--queue", "mail", "--json").ok(t).decode(t, &tasks)
	if len(tasks) != 1 || tasks[0].ID != failed || tasks[0].Attempts[0].Error != "smtp: 451 try later" {
		t.Fatalf("failed in mail = %+v", tasks)
	}
	b.run(t, "list", "--error-contains", "MEMORY", "--since", "1h", "--json").ok(t).decode(t, &tasks)
	if len(tasks) != 1 || tasks[0].Queue != "reports" {
		t.Fatalf("by error = %+v", tasks)
	}
	b.run(t, "list", "--limit", "2", "--json").ok(t).decode(t, &tasks)
	if len(tasks) != 2 {
		t.Fatalf("--limit 2 gave %d", len(tasks))
	}
	human := b.run(t, "list", "--status", "failed,running").ok(t).stdout
	for _, want := range []string{"ID", "LAST ERROR", "smtp: 451 try later", "out of memory", "running", "3/3"} {
		if !strings.Contains(human, want) {
			t.Fatalf("list table lacks %q:\n%s", want, human)
		}
	}
	if out := b.run(t, "list", "--name", "nothing").ok(t).stdout; out != "No tasks match.\n" {
		t.Fatalf("empty list says %q", out)
	}

	// show: the history, and who holds a running task now.
	var shown taskOut
	b.run(t, "show", fmt.Sprint(failed), "--json").ok(t).decode(t, &shown)
	if shown.ID != failed || len(shown.Attempts) != 1 || shown.Attempts[0].Host != "box" || shown.Attempts[0].PID != 7 || shown.Lock != nil {
		t.Fatalf("show failed = %+v", shown)
	}
	info, err := schema.Read(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	cfg := pgtest.Config(t, b.schema).ConnConfig
	cfg.RuntimeParams["application_name"] = "holder"
	holder, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1::integer, $2::integer)", int32(uint32(info.TableOID)), int32(running)); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `INSERT INTO skiplock_workers (id, host, pid, queues, lock_backend_pid)
		VALUES ('w1', 'box', 4242, '{mail}', pg_backend_pid())`); err != nil {
		t.Fatal(err)
	}
	b.run(t, "show", fmt.Sprint(running), "--json").ok(t).decode(t, &shown)
	if len(shown.Attempts) != 2 || shown.Attempts[1].Outcome != "running" || shown.Lock == nil ||
		shown.Lock.ApplicationName != "holder" || shown.Lock.WorkerID != "w1" || shown.Lock.WorkerHost != "box" {
		t.Fatalf("show running = %+v (lock %+v)", shown, shown.Lock)
	}
	human = b.run(t, "show", fmt.Sprint(running)).ok(t).stdout
	for _, want := range []string{"Task ", "Attempts:", "first try failed", "Lock: held for", "holder", "worker w1 on box pid 4242"} {
		if !strings.Contains(human, want) {
			t.Fatalf("show lacks %q:\n%s", want, human)
		}
	}
}

func TestRequeueByIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f1 := b.insert(t, "mail", "send", queue.StatusFailed, 3, 3, "boom")
	f2 := b.insert(t, "mail", "send", queue.StatusFailed, 1, 5, "boom")
	running := b.insert(t, "mail", "send", queue.StatusRunning, 1, 3, "")
	cancelled := b.insert(t, "mail", "send", queue.StatusCancelled, 1, 3, "")

	var out changeOut
	r := b.run(t, "requeue", fmt.Sprint(f1), fmt.Sprint(f2), fmt.Sprint(running), fmt.Sprint(cancelled), "424242", "--json")
	if r.code != cli.ExitPartial {
		t.Fatalf("exit %d, want %d (partial); stderr %q", r.code, cli.ExitPartial, r.stderr)
	}
	if line := r.oneLine(t); !strings.Contains(line, "3 of 5 tasks not requeued") {
		t.Fatalf("stderr = %q", line)
	}
	r.decode(t, &out)
	if out.Count != 2 || !slices.Equal(out.IDs, []int64{f1, f2}) || len(out.Skipped) != 3 {
		t.Fatalf("out = %+v", out)
	}
	reasons := map[int64]string{}
	for _, s := range out.Skipped {
		reasons[s.ID] = s.Reason
	}
	if reasons[running] != "running, not requeued" || !strings.Contains(reasons[cancelled], "--cancelled") || reasons[424242] != "not found" {
		t.Fatalf("reasons = %v", reasons)
	}
	if b.status(t, running) != queue.StatusRunning || b.status(t, cancelled) != queue.StatusCancelled {
		t.Fatal("a task that was not failed changed")
	}
	if n := b.count(t, "id = $1 AND status = 'pending' AND attempt = 3 AND max_attempts = 4 AND errors -> -1 ->> 'error' = 'requeued by skiplock requeue'", f1); n != 1 {
		t.Fatalf("task %d was not requeued with one more attempt", f1)
	}

	// Already pending is fine; --cancelled with --reset-attempts.
	human := b.run(t, "requeue", fmt.Sprint(f1), fmt.Sprint(cancelled), "--cancelled", "--reset-attempts").ok(t).stdout
	if !strings.Contains(human, "already pending") || !strings.Contains(human, "Requeued 1 task.") {
		t.Fatalf("requeue output:\n%s", human)
	}
	if n := b.count(t, "id = $1 AND status = 'pending' AND attempt = 0", cancelled); n != 1 {
		t.Fatal("cancelled task not requeued with attempts reset")
	}

	// Dry run by ID changes nothing and says the same.
	f3 := b.insert(t, "mail", "send", queue.StatusFailed, 1, 1, "x")
	before := b.snapshot(t)
	b.run(t, "requeue", fmt.Sprint(f3), "--dry-run", "--json").ok(t).decode(t, &out)
	if !out.DryRun || out.Count != 1 || !slices.Equal(out.IDs, []int64{f3}) || b.snapshot(t) != before {
		t.Fatalf("dry run = %+v", out)
	}
}

func TestRequeueFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 25 {
		b.insert(t, "mail", "send", queue.StatusFailed, 2, 2, fmt.Sprintf("dial tcp: connection refused (%d)", i))
	}
	other := b.insert(t, "mail", "send", queue.StatusFailed, 2, 2, "invalid address")
	b.insert(t, "reports", "build", queue.StatusFailed, 1, 1, "connection refused")
	filter := []string{"requeue", "--failed", "--queue", "mail", "--name", "send", "--error-contains", "refused", "--since", "1h"}

	// Dry run: how many and which, nothing changed.
	before := b.snapshot(t)
	var out changeOut
	b.run(t, append(filter, "--dry-run", "--limit", "10", "--json")...).ok(t).decode(t, &out)
	if !out.DryRun || out.Count != 25 || len(out.Tasks) != 10 {
		t.Fatalf("dry run = count %d, %d tasks", out.Count, len(out.Tasks))
	}
	human := b.run(t, append(filter, "--dry-run")...).ok(t).stdout
	if !strings.Contains(human, "Dry run: 25 failed tasks in queue mail named send") || !strings.Contains(human, "connection refused") {
		t.Fatalf("dry run says:\n%s", human)
	}

	// No terminal and no --yes: refused. A person who says no: not done.
	r := b.run(t, filter...)
	if r.code != cli.ExitError || !strings.Contains(r.oneLine(t), "pass --yes") {
		t.Fatalf("without --yes: exit %d, %q", r.code, r.stderr)
	}
	r = b.runEnv(t, cli.Env{Interactive: true, Stdin: strings.NewReader("no\n")}, filter...)
	if r.code != cli.ExitError || !strings.Contains(r.stderr, "Requeue 25 failed tasks in queue mail") {
		t.Fatalf("answered no: exit %d, %q", r.code, r.stderr)
	}
	if b.snapshot(t) != before {
		t.Fatal("tasks changed without confirmation")
	}

	// Yes, in batches of 10, with progress on stderr.
	r = b.runEnv(t, cli.Env{Interactive: true, Stdin: strings.NewReader("y\n"), ProgressInterval: time.Nanosecond},
		append(filter, "--batch-size", "10")...).ok(t)
	if !strings.Contains(r.stdout, "Requeued 25 tasks.") {
		t.Fatalf("stdout = %q", r.stdout)
	}
	for _, want := range []string{"requeued 10 of 25 tasks (40%)", "requeued 20 of 25", "requeued 25 of 25 tasks (100%)"} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("progress lacks %q:\n%s", want, r.stderr)
		}
	}
	if n := b.count(t, "status = 'pending'"); n != 25 || b.status(t, other) != queue.StatusFailed {
		t.Fatalf("%d pending after requeue, want 25", n)
	}

	// --yes for scripts; nothing left to do is not an error.
	b.run(t, append(filter, "--yes", "--json")...).ok(t).decode(t, &out)
	if out.Count != 0 {
		t.Fatalf("second requeue = %+v", out)
	}
	b.run(t, "requeue", "--failed", "--yes", "--json").ok(t).decode(t, &out)
	if out.Count != 2 {
		t.Fatalf("requeue --failed = %+v", out)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pending := b.insert(t, "q", "a", queue.StatusPending, 0, 3, "")
	failed := b.insert(t, "q", "a", queue.StatusFailed, 3, 3, "x")
	running := b.insert(t, "q", "a", queue.StatusRunning, 1, 3, "")
	done := b.insert(t, "q", "a", queue.StatusCompleted, 1, 3, "")

	// A named running task gets a cancellation request, which its worker
	// acts on (worker tests cover that); it stays running until then.
	r := b.run(t, "cancel", fmt.Sprint(pending), fmt.Sprint(failed), fmt.Sprint(running)).ok(t)
	if !strings.Contains(r.stdout, "cancellation requested (running") || !strings.Contains(r.stdout, "Cancelled 2 tasks; cancellation requested for 1 running task.") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	if b.status(t, pending) != queue.StatusCancelled || b.status(t, failed) != queue.StatusCancelled || b.status(t, running) != queue.StatusRunning {
		t.Fatal("wrong statuses after cancel")
	}
	if n := b.count(t, "id = $1 AND cancel_requested_at IS NOT NULL", running); n != 1 {
		t.Fatal("running task has no cancellation request")
	}
	if n := b.count(t, "id = $1 AND finished_at IS NOT NULL", pending); n != 1 {
		t.Fatal("cancelled task has no finished_at")
	}
	// Cancelling again is fine; a completed task is not.
	b.run(t, "cancel", fmt.Sprint(pending)).ok(t)
	if r := b.run(t, "cancel", fmt.Sprint(done)); r.code != cli.ExitPartial {
		t.Fatalf("cancel completed: exit %d", r.code)
	}

	// By filter: pending tasks of queue "bulk"; running ones are reported.
	for range 4 {
		b.insert(t, "bulk", "b", queue.StatusPending, 0, 3, "")
	}
	b.insert(t, "bulk", "b", queue.StatusRunning, 1, 3, "")
	var out changeOut
	b.run(t, "cancel", "--queue", "bulk", "--dry-run", "--json").ok(t).decode(t, &out)
	if out.Count != 4 || b.count(t, "queue = 'bulk' AND status = 'cancelled'") != 0 {
		t.Fatalf("dry run = %+v", out)
	}
	r = b.run(t, "cancel", "--queue", "bulk", "--status", "pending", "--yes").ok(t)
	if !strings.Contains(r.stdout, "Cancelled 4 tasks.") || !strings.Contains(r.stdout, "1 task is matching the other filters: running, not cancelled") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	if b.count(t, "queue = 'bulk' AND status = 'running' AND cancel_requested_at IS NULL") != 1 {
		t.Fatal("running task in bulk changed")
	}
	// With --status running, running tasks get a request.
	r = b.run(t, "cancel", "--queue", "bulk", "--status", "running", "--yes").ok(t)
	if !strings.Contains(r.stdout, "1 was running: cancellation requested") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	if b.count(t, "queue = 'bulk' AND status = 'running' AND cancel_requested_at IS NOT NULL") != 1 {
		t.Fatal("running task in bulk has no cancellation request")
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for _, s := range []queue.Status{queue.StatusCompleted, queue.StatusFailed, queue.StatusCancelled} {
		for range 5 {
			b.insert(t, "q", "old", s, 1, 1, "")
		}
	}
	if _, err := b.pool.Exec(ctx, "UPDATE skiplock_tasks SET finished_at = now() - interval '10 days'"); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "q", "new", queue.StatusCompleted, 1, 1, "")
	b.insert(t, "q", "pending", queue.StatusPending, 0, 1, "")

	var out changeOut
	b.run(t, "purge", "--dry-run", "--json").ok(t).decode(t, &out)
	if out.Count != 15 || b.count(t, "true") != 17 {
		t.Fatalf("dry run = %+v", out)
	}
	if r := b.run(t, "purge"); r.code != cli.ExitError || b.count(t, "true") != 17 {
		t.Fatalf("purge without --yes: exit %d, %q", r.code, r.stderr)
	}
	b.run(t, "purge", "--older-than", "7d", "--status", "completed", "--yes", "--json").ok(t).decode(t, &out)
	if out.Count != 5 {
		t.Fatalf("purged %d completed, want 5", out.Count)
	}
	r := b.runEnv(t, cli.Env{ProgressInterval: time.Nanosecond}, "purge", "--older-than", "168h", "--batch-size", "4", "--yes").ok(t)
	if !strings.Contains(r.stdout, "Purged 10 tasks.") || !strings.Contains(r.stderr, "purged 8 of 10 tasks") {
		t.Fatalf("purge: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if n := b.count(t, "true"); n != 2 {
		t.Fatalf("%d tasks left, want the recent and the pending one", n)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 3 {
		b.insert(t, "a", "n", queue.StatusCompleted, 1, 1, "")
	}
	b.insert(t, "a", "n", queue.StatusFailed, 1, 1, "x")
	b.insert(t, "b", "n", queue.StatusPending, 0, 1, "")
	var out struct {
		Queues []struct {
			Queue            string  `json:"queue"`
			Pending          int64   `json:"pending"`
			Completed        int64   `json:"completed"`
			Failed           int64   `json:"failed"`
			OldestDueSeconds float64 `json:"oldest_due_seconds"`
			Recent           []struct {
				Minutes     int     `json:"minutes"`
				Completed   int64   `json:"completed"`
				PerMinute   float64 `json:"per_minute"`
				FailureRate float64 `json:"failure_rate"`
			} `json:"recent"`
		} `json:"queues"`
		Total struct {
			Completed int64 `json:"completed"`
			Pending   int64 `json:"pending"`
		} `json:"total"`
	}
	b.run(t, "stats", "--json").ok(t).decode(t, &out)
	if len(out.Queues) != 2 || out.Queues[0].Queue != "a" || out.Queues[0].Completed != 3 || out.Queues[0].Failed != 1 {
		t.Fatalf("stats = %+v", out)
	}
	if r := out.Queues[0].Recent; len(r) != 3 || r[0].Minutes != 1 || r[0].PerMinute != 3 || r[0].FailureRate != 0.25 || r[2].Minutes != 15 {
		t.Fatalf("recent = %+v", r)
	}
	if q := out.Queues[1]; q.Pending != 1 || out.Total.Completed != 3 || out.Total.Pending != 1 {
		t.Fatalf("b = %+v, total %+v", q, out.Total)
	}
	human := b.run(t, "stats").ok(t).stdout
	for _, want := range []string{"QUEUE", "OLDEST DUE", "(all)"} {
		if !strings.Contains(human, want) {
			t.Fatalf("stats table lacks %q:\n%s", want, human)
		}
	}
	// Each window is a column of its own, headed in words: queue a
	// completed 3 tasks and failed 1 within the last minute.
	cells := tableRow(t, human, "a")
	for head, want := range map[string]string{
		"DONE LAST 1M": "3", "AVG/MIN 5M": "0.6", "AVG/MIN 15M": "0.2",
		"FAILED% 1M": "25%", "FAILED% 5M": "25%", "FAILED% 15M": "25%",
	} {
		if got := cells[head]; got != want {
			t.Errorf("stats column %q of queue a = %q, want %q:\n%s", head, got, want, human)
		}
	}
}

// tableRow reads the row of a table whose first cell is name, by column head
// (heads and cells are separated by two spaces or more).
func tableRow(t *testing.T, table, name string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	split := regexp.MustCompile(`\s{2,}`)
	heads := split.Split(strings.TrimSpace(lines[0]), -1)
	for _, l := range lines[1:] {
		cells := split.Split(strings.TrimSpace(l), -1)
		if len(cells) == 0 || cells[0] != name {
			continue
		}
		if len(cells) != len(heads) {
			t.Fatalf("row %q has %d cells for %d heads:\n%s", l, len(cells), len(heads), table)
		}
		out := make(map[string]string, len(heads))
		for i, h := range heads {
			out[h] = cells[i]
		}
		return out
	}
	t.Fatalf("table has no row %q:\n%s", name, table)
	return nil
}

// TestStatsUnhandled: stats lists the pending tasks that no live worker
// handles, by queue and name, with their count and the oldest; a live
// worker's names (or its lack of names, from an older worker) cover its
// queues, a gone worker's nothing.
func TestStatsUnhandled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	if out := b.run(t, "stats").ok(t).stdout; strings.Contains(out, "Waiting for a handler") {
		t.Fatalf("stats of an empty schema lists tasks waiting for a handler:\n%s", out)
	}
	first := b.insert(t, "mail", "mail.send", queue.StatusPending, 0, 3, "")
	b.insert(t, "mail", "mail.send", queue.StatusPending, 0, 3, "")
	b.insert(t, "mail", "mail.bounce", queue.StatusPending, 0, 3, "")
	b.insert(t, "mail", "mail.new", queue.StatusPending, 0, 3, "")
	b.insert(t, "mail", "mail.new", queue.StatusCompleted, 1, 3, "")
	b.insert(t, "legacy", "anything", queue.StatusPending, 0, 3, "")
	if _, err := b.pool.Exec(ctx, `INSERT INTO skiplock_workers (id, host, pid, queues, names, heartbeat_at) VALUES
		('new', 'h', 1, '{mail}', '{mail.bounce}', now()),
		('old', 'h', 2, '{legacy}', NULL, now()),
		('gone', 'h', 3, '{mail}', '{mail.send,mail.new}', now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	task, err := b.client.Get(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Unhandled []struct {
			Queue           string    `json:"queue"`
			Name            string    `json:"name"`
			Tasks           int64     `json:"tasks"`
			OldestCreatedAt time.Time `json:"oldest_created_at"`
		} `json:"unhandled"`
	}
	b.run(t, "stats", "--json").ok(t).decode(t, &out)
	if u := out.Unhandled; len(u) != 2 || u[0].Queue != "mail" || u[0].Name != "mail.new" || u[0].Tasks != 1 ||
		u[1].Name != "mail.send" || u[1].Tasks != 2 || !u[1].OldestCreatedAt.Equal(task.CreatedAt) {
		t.Fatalf("stats --json unhandled = %+v, want mail.new (1) and mail.send (2, oldest %s)", u, task.CreatedAt)
	}
	human := b.run(t, "stats").ok(t).stdout
	for _, want := range []string{"Waiting for a handler", "NAME", "mail.send", "mail.new"} {
		if !strings.Contains(human, want) {
			t.Fatalf("stats lacks %q:\n%s", want, human)
		}
	}
	if strings.Contains(human, "mail.bounce") || strings.Contains(human, "anything") {
		t.Fatalf("stats lists names a live worker handles:\n%s", human)
	}
}

func TestLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	if out := b.run(t, "locks").ok(t).stdout; !strings.Contains(out, "No task locks are held.") {
		t.Fatalf("locks on an idle schema:\n%s", out)
	}
	id := b.insert(t, "q", "held", queue.StatusRunning, 1, 3, "")
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
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1::integer, $2::integer)", int32(uint32(info.TableOID)), int32(id)); err != nil {
		t.Fatal(err)
	}
	// The holder also keeps the row locked while another session waits.
	tx := pgtest.HoldTaskRow(t, holder, id)
	waiting := make(chan error, 1)
	go func() {
		_, err := b.pool.Exec(ctx, "UPDATE skiplock_tasks SET priority = 5 WHERE id = $1", id)
		waiting <- err
	}()

	type locksOut struct {
		Locks []struct {
			TaskID          int64   `json:"task_id"`
			Name            string  `json:"name"`
			PID             int     `json:"pid"`
			ApplicationName string  `json:"application_name"`
			HeldSeconds     float64 `json:"held_seconds"`
		} `json:"locks"`
		Waits []struct {
			PID       int    `json:"pid"`
			BlockedBy []int  `json:"blocked_by"`
			Query     string `json:"query"`
		} `json:"waits"`
	}
	var out locksOut
	waitFor(t, time.Second, "the UPDATE to wait for the row lock", func() bool {
		out = locksOut{}
		b.run(t, "locks", "--json").ok(t).decode(t, &out)
		for _, w := range out.Waits {
			if strings.Contains(w.Query, "SET priority = 5") {
				return true
			}
		}
		return false
	})
	if len(out.Locks) != 1 || out.Locks[0].TaskID != id || out.Locks[0].ApplicationName != "lock-holder" || out.Locks[0].HeldSeconds < 59 {
		t.Fatalf("locks = %+v", out.Locks)
	}
	holderPID := out.Locks[0].PID
	for _, w := range out.Waits {
		if strings.Contains(w.Query, "SET priority = 5") && !slices.Contains(w.BlockedBy, holderPID) {
			t.Fatalf("wait %+v is not blocked by the holder %d", w, holderPID)
		}
	}
	human := b.run(t, "locks").ok(t).stdout
	for _, want := range []string{"Task locks held (1):", "lock-holder", "Sessions waiting for a lock", "BLOCKED BY"} {
		if !strings.Contains(human, want) {
			t.Fatalf("locks table lacks %q:\n%s", want, human)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	var b *bundle // no database needed
	var out struct {
		Version       string `json:"version"`
		Library       string `json:"library"`
		Go            string `json:"go"`
		SchemaVersion uint   `json:"schema_version"`
	}
	b.run(t, "version", "--json").ok(t).decode(t, &out)
	// A test binary built in the workspace: the library is the checkout's.
	if out.Go != runtime.Version() || out.SchemaVersion != migrations.Latest || out.Version == "" || out.Library != "(devel)" {
		t.Fatalf("version = %+v", out)
	}
	human := b.run(t, "version").ok(t).stdout
	if !strings.HasPrefix(human, "skiplock ") || !strings.Contains(human, "library: github.com/skiplock/skiplock (devel)") ||
		!strings.Contains(human, fmt.Sprintf("needs migration version %d", migrations.Latest)) {
		t.Fatalf("version says %q", human)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	var b *bundle
	for _, cmd := range []string{"requeue", "migrate", "enqueue", "list", "show", "cancel", "purge", "stats", "locks", "audit", "version"} {
		r := b.run(t, cmd, "--help").ok(t)
		if !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "skiplock "+cmd) {
			t.Errorf("%s --help lacks examples:\n%s", cmd, r.stdout)
		}
	}
	if r := b.run(t).ok(t); !strings.Contains(r.stdout, "requeue") || !strings.Contains(r.stdout, "Exit codes") {
		t.Fatalf("skiplock with no command:\n%s", r.stdout)
	}
}

func TestQueuePauseResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, "reports", "r", queue.StatusPending, 0, 3, "")
	r := b.run(t, "queue", "pause", "reports", "empty", "--create").ok(t)
	if !strings.Contains(r.stdout, "Paused queue reports.") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	var out struct {
		Queues []struct {
			Name     string  `json:"name"`
			Pending  int64   `json:"pending"`
			PausedAt *string `json:"paused_at"`
		} `json:"queues"`
	}
	b.run(t, "queue", "list", "--json").ok(t).decode(t, &out)
	if len(out.Queues) != 2 || out.Queues[1].Name != "reports" || out.Queues[1].Pending != 1 || out.Queues[1].PausedAt == nil ||
		out.Queues[0].Name != "empty" || out.Queues[0].PausedAt == nil {
		t.Fatalf("queue list = %+v", out)
	}
	b.run(t, "queue", "resume", "reports").ok(t)
	b.run(t, "queue", "list", "--json").ok(t).decode(t, &out)
	if out.Queues[1].PausedAt != nil {
		t.Fatalf("still paused: %+v", out.Queues[1])
	}
}

// TestDryRunByIDs: a dry run of a change of named tasks changes nothing and
// reports what the change then does, task by task, as the statements of the
// change decide it (they run in a transaction that is rolled back).
func TestDryRunByIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// One task in each status, and an ID that no task has.
	var ids []string
	for _, s := range queue.Statuses {
		stored, attempt := s, 1
		switch s {
		case queue.StatusScheduled, queue.StatusPending:
			stored, attempt = queue.StatusPending, 0
		case queue.StatusRetrying:
			stored = queue.StatusPending
		}
		id := b.insert(t, "q", "n", stored, attempt, 3, "")
		if s == queue.StatusScheduled || s == queue.StatusRetrying {
			if _, err := b.pool.Exec(context.Background(), "UPDATE skiplock_tasks SET run_at = now() + interval '1 hour' WHERE id = $1", id); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, fmt.Sprint(id))
	}
	ids = append(ids, "424242")

	type outcome struct {
		changed []int64
		skipped map[int64]string // status, "ok" appended when fine
	}
	read := func(out changeOut) outcome {
		o := outcome{changed: out.IDs, skipped: map[int64]string{}}
		for _, s := range out.Skipped {
			o.skipped[s.ID] = fmt.Sprint(s.Status, " ", s.OK)
		}
		return o
	}
	for _, args := range [][]string{
		{"requeue", "--cancelled"},
		{"cancel"},
		{"delete", "--yes"},
	} {
		before := b.snapshot(t)
		var dry, real changeOut
		r := b.run(t, append(append(args, ids...), "--dry-run", "--json")...)
		if r.code != cli.ExitPartial {
			t.Fatalf("%s --dry-run: exit %d (%s)", args[0], r.code, r.stderr)
		}
		r.decode(t, &dry)
		if !dry.DryRun || b.snapshot(t) != before {
			t.Fatalf("%s --dry-run changed tasks, or says it is no dry run: %+v", args[0], dry)
		}
		r = b.run(t, append(append(args, ids...), "--json")...)
		if r.code != cli.ExitPartial {
			t.Fatalf("%s: exit %d (%s)", args[0], r.code, r.stderr)
		}
		r.decode(t, &real)
		if d, w := read(dry), read(real); !slices.Equal(d.changed, w.changed) || !maps.Equal(d.skipped, w.skipped) || len(d.changed) == 0 {
			t.Fatalf("%s: dry run said %+v, the change did %+v", args[0], d, w)
		}
	}
}
