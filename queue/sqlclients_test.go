package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/worker"
)

// python is Debian's python3, which has python3-psycopg (a pyenv python on
// PATH may not).
const python = "/usr/bin/python3"

// TestEnqueueFromSQLClients: docs/SQL.md's enqueue snippets, run by psql and
// by Python's psycopg 3, enqueue tasks that a Go worker runs with their
// payloads; its poll interval is an hour, so only the NOTIFY of the SQL
// functions can wake it. Bad calls from both clients fail with SQLSTATE
// 22023 (22001 over a limit) and a message naming the field, and enqueue
// nothing.
func TestEnqueueFromSQLClients(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgtest.Psql(t)
	if out, err := exec.Command(python, "-c", "import psycopg").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import psycopg (%v: %s): install python3-psycopg (Debian: apt-get install python3-psycopg; .ci/test installs .ci/packages)",
			python, err, strings.TrimSpace(string(out)))
	}
	schema := pgtest.Schema(t, true)
	pool := pgtest.NewPool(t, schema)
	url := pgtest.Server(t).URL
	env := append(os.Environ(), "DATABASE_URL="+url, "PGOPTIONS=-c search_path="+schema)

	// The worker: records what ran; tells when each queue's loop has found
	// nothing and sleeps until a notification (or an hour's poll).
	type ran struct{ name, queue, payload string }
	var (
		mu   sync.Mutex
		runs []ran
	)
	record := func(_ context.Context, task *worker.Task) error {
		var payload any
		if err := json.Unmarshal(task.Payload, &payload); err != nil {
			return err
		}
		p, _ := json.Marshal(payload) // compact, keys sorted
		mu.Lock()
		runs = append(runs, ran{task.Name, task.Queue, string(p)})
		mu.Unlock()
		return nil
	}
	idle := &idleObserver{asleep: make(chan string, 10)}
	w := worker.New(pool, worker.Config{
		Queues: []string{"default", "mail"}, PollInterval: time.Hour, Observer: idle,
		Logger: slog.New(slog.DiscardHandler),
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- w.Run(runCtx, worker.Handlers{"a": record, "b": record, "email.send": record, "report.build": record, "ledger.apply": record})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	for range 2 {
		select {
		case <-idle.asleep:
		case err := <-done:
			t.Fatalf("worker: %v", err)
		case <-time.After(pgtest.Patient(time.Second)):
			t.Fatal("the worker's first claims did not happen")
		}
	}
	waitRuns := func(what string, want ...ran) {
		t.Helper()
		pgtest.Eventually(t, time.Second, fmt.Sprintf("%s: tasks %v to run (the worker polls hourly: only NOTIFY wakes it)", what, want), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return !slices.ContainsFunc(want, func(r ran) bool { return !slices.Contains(runs, r) })
		})
	}
	tasks := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// psql: docs/SQL.md's SQL. The delayed email stays pending.
	psql := exec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-", url)
	psql.Env, psql.Stdin = env, strings.NewReader(readmeRecipe(t, "enqueue-sql"))
	if out, err := psql.CombinedOutput(); err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
	waitRuns("psql", ran{"a", "default", "1"}, ran{"b", "mail", "null"}, ran{"ledger.apply", "default", `{"amount":5}`})
	var delayed string
	if err := pool.QueryRow(ctx, `SELECT format('%s %s %s %s %s %s %s', status, queue, priority, max_attempts, timeout_ms,
		unique_key, exclusive_key) FROM skiplock_tasks WHERE name = 'email.send' AND run_at > now() + interval '50 minutes'`).Scan(&delayed); err != nil ||
		delayed != "pending mail -1 5 30000 welcome:42 account:42" {
		t.Fatalf("psql's delayed email.send: %q, %v", delayed, err)
	}
	var debounced string
	if err := pool.QueryRow(ctx, `SELECT string_agg(format('%s %s %s', status, payload->>'rev', run_at > now() + interval '4 minutes'), ',')
		FROM skiplock_tasks WHERE replace_key = 'doc:42'`).Scan(&debounced); err != nil || debounced != "pending 2 t" {
		t.Fatalf("psql's debounced search.index: %q, %v", debounced, err)
	}

	// Python: docs/SQL.md's snippet.
	dir := t.TempDir()
	script := filepath.Join(dir, "enqueue.py")
	if err := os.WriteFile(script, []byte(readmeRecipe(t, "enqueue-python")), 0o644); err != nil {
		t.Fatal(err)
	}
	py := exec.Command(python, script)
	py.Env = env
	if out, err := py.CombinedOutput(); err != nil || !regexp.MustCompile(`^\d+ \[\d+, \d+\]\n$`).Match(out) {
		t.Fatalf("python: %v\n%s", err, out)
	}
	waitRuns("python",
		ran{"email.send", "mail", `{"to":"ada@example.com"}`},
		ran{"report.build", "default", `{"day":"2026-01-02"}`},
		ran{"email.send", "mail", `{"to":"bob@example.com"}`})

	// Bad calls: SQLSTATE 22023 naming the field (22001 for a field over
	// its limit), and nothing enqueued.
	const invalid, tooLong = "22023", "22001"
	bad := []struct{ sql, code, want string }{
		{`SELECT skiplock_enqueue('', '{}')`, invalid, "skiplock: invalid task: name is empty"},
		{`SELECT skiplock_enqueue('x', '{}', queue => '')`, invalid, "skiplock: invalid task: queue name is empty"},
		{`SELECT skiplock_enqueue('x', '{}', priority => 40000)`, invalid, "skiplock: invalid task: priority 40000 is outside -32768..32767"},
		{`SELECT skiplock_enqueue('x', '{}', max_attempts => 0)`, invalid, "skiplock: invalid task: max attempts must be at least 1"},
		{`SELECT skiplock_enqueue('x', '{}', timeout => '0s')`, invalid, "skiplock: invalid task: timeout must be at least 1ms"},
		{`SELECT skiplock_enqueue('x', '{}', metadata => '[1]')`, invalid, "skiplock: invalid task: metadata must be a JSON object"},
		{`SELECT * FROM skiplock_enqueue_many('{"name": "x"}')`, invalid, "skiplock: invalid task: skiplock_enqueue_many takes a JSON array"},
		{`SELECT * FROM skiplock_enqueue_many('[{"name": "ok"}, {"name": "x", "priority": 40000}]')`, invalid,
			"skiplock: invalid task 2: priority 40000 is outside"},
		{`SELECT * FROM skiplock_enqueue_many('[{"name": "ok"}, {"name": "x", "priority": "high"}]')`, invalid,
			`skiplock: invalid task 2: invalid input syntax for type integer: "high"`},
		{`SELECT * FROM skiplock_enqueue_many('[{"name": "ok"}, {"name": "x", "prio": 1}]')`, invalid, "skiplock: invalid task 2: unknown key 'prio'"},
		{`SELECT skiplock_enqueue(repeat('n', 256))`, tooLong,
			"skiplock: invalid task: name is 256 bytes, over the 255-byte limit of names: 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn'..."},
		{`SELECT skiplock_enqueue('x', to_jsonb(repeat('p', 1048575)))`, tooLong,
			"skiplock: invalid task: payload is 1,048,577 bytes, over the 1,048,576-byte limit (skiplock.max_payload_bytes)"},
		{`SELECT * FROM skiplock_enqueue_many(jsonb_build_array(jsonb_build_object('name', 'ok'),
			jsonb_build_object('name', 'x', 'metadata', jsonb_build_object('k', repeat('m', 65536)))))`, tooLong,
			"skiplock: invalid task 2: metadata is 65,545 bytes, over the 65,536-byte limit (skiplock.max_metadata_bytes)"},
	}
	before := tasks()
	for _, c := range bad {
		cmd := exec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-c", c.sql, url)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "ERROR:  "+c.code+": "+c.want) {
			t.Errorf("psql %s: %v, %.300q; want ERROR %s %q", c.sql, err, out, c.code, c.want)
		}
	}
	// From Python: each call in its own transaction; prints SQLSTATE and
	// message per call.
	var sqls []string
	for _, c := range bad {
		sqls = append(sqls, c.sql)
	}
	calls, _ := json.Marshal(sqls)
	py = exec.Command(python, "-c", `
import json, os, sys
import psycopg
with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
    for sql in json.loads(sys.argv[1]):
        try:
            conn.execute(sql)
            print(json.dumps({"sqlstate": None}))
        except psycopg.Error as e:
            print(json.dumps({"sqlstate": e.sqlstate, "class": type(e).__name__, "message": e.diag.message_primary}))
`, string(calls))
	py.Env = env
	out, err := py.Output()
	if err != nil {
		t.Fatalf("python bad calls: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(bad) {
		t.Fatalf("python bad calls: %d results for %d calls:\n%s", len(lines), len(bad), out)
	}
	for i, line := range lines {
		var r struct{ SQLState, Class, Message string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		class := map[string]string{invalid: "InvalidParameterValue", tooLong: "StringDataRightTruncation"}[bad[i].code]
		if r.SQLState != bad[i].code || r.Class != class || !strings.Contains(r.Message, bad[i].want) {
			t.Errorf("python %s: %+v; want %s %s %q", bad[i].sql, r, bad[i].code, class, bad[i].want)
		}
	}
	// Text that is not JSON never reaches the functions: jsonb's input
	// rejects it (22P02).
	cmd := exec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-c", `SELECT skiplock_enqueue('x', '{"a":')`, url)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "ERROR:  22P02: invalid input syntax for type json") {
		t.Errorf("psql with bad JSON: %v, %q", err, out)
	}
	if after := tasks(); after != before {
		t.Fatalf("bad calls enqueued %d tasks", after-before)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 6 {
		t.Fatalf("ran %d tasks, want 6: %v", len(runs), runs)
	}
}

// idleObserver reports each claim that found nothing: its queue's loop then
// sleeps until a notification or the poll interval.
type idleObserver struct {
	worker.NopObserver
	asleep chan string
}

func (o *idleObserver) Claimed(queue string, _, got int) {
	if got == 0 {
		select {
		case o.asleep <- queue:
		default:
		}
	}
}

// readmeRecipe is the code block that follows <!-- recipe: name --> in the
// docs/SQL.md.
func readmeRecipe(t *testing.T, name string) string {
	t.Helper()
	readme, err := os.ReadFile("../docs/SQL.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- recipe: " + regexp.QuoteMeta(name) + " -->\n```[a-z]*\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatalf("docs/SQL.md has no recipe %q", name)
	}
	return string(m[1])
}
