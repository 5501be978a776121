package cli_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TestBadInput: each case exits non-zero with one line on stderr that names
// the problem, and changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failed := b.insert(t, "q", "n", queue.StatusFailed, 1, 1, "boom")
	b.insert(t, "q", "n", queue.StatusCompleted, 1, 1, "")
	if _, err := b.pool.Exec(context.Background(), "UPDATE skiplock_tasks SET finished_at = now() - interval '30 days'"); err != nil {
		t.Fatal(err)
	}
	unmigrated := pgtest.SchemaURL(t, pgtest.Schema(t, false))
	missing := b.schema + "_missing" // never created
	noSchema := fmt.Sprintf(`schema %q does not exist: create it (CREATE SCHEMA "%s"), then migrate up`, missing, missing)

	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown command", []string{"requeu"}, cli.ExitUsage, `unknown command "requeu" (did you mean "requeue"?)`},
		{"unknown subcommand", []string{"migrate", "sideways"}, cli.ExitUsage, `skiplock: migrate: unknown command "sideways"`},
		{"unknown flag", []string{"list", "--colour"}, cli.ExitUsage, "unknown flag: --colour"},
		{"flag without value", []string{"list", "--limit"}, cli.ExitUsage, "flag needs an argument"},
		{"malformed ID", []string{"requeue", "4x2"}, cli.ExitUsage, `skiplock: requeue: "4x2" is not a task ID (want a positive integer)`},
		{"zero ID", []string{"show", "0"}, cli.ExitUsage, `"0" is not a task ID`},
		{"requeue without selection", []string{"requeue"}, cli.ExitUsage, "name task IDs, or select tasks with --failed"},
		{"requeue IDs and filter", []string{"requeue", fmt.Sprint(failed), "--failed"}, cli.ExitUsage, "not both"},
		{"requeue filter without --yes", []string{"requeue", "--failed"}, cli.ExitError, "Requeue 1 failed task?: refusing without confirmation, as stdin is not a terminal (pass --yes)"},
		{"bad --since", []string{"requeue", "--failed", "--since", "yesterday", "--yes"}, cli.ExitUsage, `--since "yesterday" is neither a duration ago`},
		{"zero batch size", []string{"requeue", "--failed", "--batch-size", "0", "--yes"}, cli.ExitUsage, `invalid argument "0" for "--batch-size" flag: must be at least 1`},
		{"batch size too large", []string{"cancel", "--status", "failed", "--batch-size", "100001", "--dry-run"}, cli.ExitUsage,
			fmt.Sprintf("batch size must be 1 to %d, got 100001", queue.MaxBatch)},
		{"dry-run limit too large", []string{"purge", "--dry-run", "--limit", "10001"}, cli.ExitUsage,
			fmt.Sprintf("limit must be 1 to %d, got 10001", queue.MaxListLimit)},
		{"list limit too large", []string{"list", "--limit", "10001"}, cli.ExitUsage, fmt.Sprintf("limit must be 1 to %d, got 10001", queue.MaxListLimit)},
		{"invalid JSON payload", []string{"enqueue", "x", `{"a":`}, cli.ExitUsage, "payload is not valid JSON"},
		{"empty payload", []string{"enqueue", "x", "-"}, cli.ExitUsage, "payload is not valid JSON: it is empty"},
		{"enqueue without name", []string{"enqueue"}, cli.ExitUsage, "enqueue needs a task name"},
		{"bad --run-at", []string{"enqueue", "x", "--run-at", "tomorrow"}, cli.ExitUsage, `--run-at "tomorrow" is not an RFC 3339 time`},
		{"bad --metadata", []string{"enqueue", "x", "--metadata", "[1]"}, cli.ExitUsage, "--metadata must be a JSON object"},
		{"bad --priority", []string{"enqueue", "x", "--priority", "99999"}, cli.ExitUsage, "--priority 99999 is outside"},
		// The limits of queue.Client, reported as it reports them.
		{"overlong name", []string{"enqueue", strings.Repeat("n", 256)}, cli.ExitUsage,
			`skiplock: enqueue: invalid task: task name is 256 bytes, over the 255-byte limit (queue.MaxNameLength): "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"...`},
		{"overlong queue", []string{"enqueue", "x", "--queue", strings.Repeat("q", 256)}, cli.ExitUsage,
			"invalid task: queue name is 256 bytes, over the 255-byte limit (queue.MaxNameLength)"},
		{"overlong key", []string{"enqueue", "x", "--exclusive-key", strings.Repeat("k", 1025)}, cli.ExitUsage,
			"invalid task: exclusive key is 1,025 bytes, over the 1,024-byte limit (queue.MaxKeyLength)"},
		{"payload over the limit", []string{"enqueue", "x", `"` + strings.Repeat("p", queue.DefaultMaxPayloadSize) + `"`}, cli.ExitUsage,
			`skiplock: enqueue: invalid task: task "x": payload is 1,048,578 bytes, over the 1,048,576-byte limit (queue.WithMaxPayloadSize)`},
		{"metadata over the limit", []string{"enqueue", "x", "--metadata", `{"k":"` + strings.Repeat("m", queue.DefaultMaxMetadataSize) + `"}`}, cli.ExitUsage,
			`invalid task: task "x": metadata is 65,544 bytes, over the 65,536-byte limit (queue.WithMaxMetadataSize)`},
		{"bad --status", []string{"list", "--status", "stuck"}, cli.ExitUsage, `--status "stuck" is not one of`},
		{"cancel completed", []string{"cancel", "--status", "completed"}, cli.ExitUsage, "completed tasks cannot be cancelled"},
		{"pause nothing", []string{"queue", "pause"}, cli.ExitUsage, "name at least one queue"},
		{"cancel without selection", []string{"cancel"}, cli.ExitUsage, "name task IDs, or select tasks"},
		{"purge pending", []string{"purge", "--status", "pending", "--yes"}, cli.ExitUsage, "pending tasks are never purged"},
		{"bad --older-than", []string{"purge", "--older-than", "a while"}, cli.ExitUsage, `--older-than "a while" is not a duration`},
		{"purge without --yes", []string{"purge"}, cli.ExitError, "pass --yes"},
		{"show two IDs", []string{"show", "1", "2"}, cli.ExitUsage, "show needs one task ID"},
		{"show missing task", []string{"show", "987654"}, cli.ExitError, "task not found: 987654"},
		{"extra argument", []string{"stats", "now"}, cli.ExitUsage, `stats takes no arguments, got "now"`},
		{"unreachable database", []string{"list", "--database-url", "postgres://postgres@127.0.0.1:1/none"}, cli.ExitError,
			"cannot connect to the database at 127.0.0.1:1"},
		{"invalid database URL", []string{"list", "--database-url", "postgres://db.invalid:notaport/x"}, cli.ExitUsage, "invalid database URL"},
		{"migrate sql, up backwards", []string{"migrate", "sql", "--from", "5", "--to", "3"}, cli.ExitUsage,
			"up goes to a newer version, got --from 5 --to 3 (to revert: skiplock migrate sql down --from 5 --to 3)"},
		{"migrate sql, down forwards", []string{"migrate", "sql", "down", "--from", "2", "--to", "4"}, cli.ExitUsage,
			"down goes to an older version, got --from 2 --to 4"},
		{"migrate sql, unknown version", []string{"migrate", "sql", "--to", "999"}, cli.ExitUsage, "--to 999 is not a migration version"},
		{"migrate sql, negative version", []string{"migrate", "sql", "--from", "-1"}, cli.ExitUsage, `invalid argument "-1" for "--from" flag`},
		{"migrate sql, bad direction", []string{"migrate", "sql", "sideways"}, cli.ExitUsage, `sql takes up or down, got "sideways"`},
		{"migrate down, zero steps", []string{"migrate", "down", "--steps", "0", "--yes"}, cli.ExitUsage, "--steps must be at least 1, got 0"},
		{"migrate down, too many steps", []string{"migrate", "down", "--steps", "99", "--yes"}, cli.ExitUsage,
			fmt.Sprintf("--steps 99 is more than the %d migrations applied to schema %s", len(migrations.Versions()), b.schema)},
		{"migrate down steps without --yes", []string{"migrate", "down", "--steps", "1"}, cli.ExitError,
			fmt.Sprintf("Revert schema %s from version %d to %d?: refusing without confirmation, as stdin is not a terminal (pass --yes)",
				b.schema, migrations.Latest, migrations.Versions()[len(migrations.Versions())-2])},
		{"missing schema, migrate up", []string{"migrate", "up", "--database-url", pgtest.SchemaURL(t, missing)}, cli.ExitError, noSchema},
		{"missing schema, migrate status", []string{"migrate", "status", "--database-url", pgtest.SchemaURL(t, missing)}, cli.ExitError, noSchema},
		{"missing schema, stats", []string{"stats", "--database-url", pgtest.SchemaURL(t, missing)}, cli.ExitError, noSchema},
		{"unmigrated schema", []string{"requeue", "--failed", "--yes", "--database-url", unmigrated}, cli.ExitError,
			"schema not migrated: run `skiplock migrate up`"},
		{"unmigrated schema, enqueue", []string{"enqueue", "x", "--database-url", unmigrated}, cli.ExitError, "skiplock migrate up"},
	}
	for _, c := range cases {
		before := b.snapshot(t)
		r := b.run(t, c.args...)
		if r.code != c.code {
			t.Errorf("%s: %q exited %d, want %d (stderr %q)", c.name, c.args, r.code, c.code, r.stderr)
			continue
		}
		line := r.oneLine(t)
		if !strings.Contains(line, c.want) {
			t.Errorf("%s: stderr %q, want it to contain %q", c.name, line, c.want)
		}
		if r.stdout != "" {
			t.Errorf("%s: stdout %q, want nothing", c.name, r.stdout)
		}
		if after := b.snapshot(t); after != before {
			t.Errorf("%s: tasks changed: %s -> %s", c.name, before, after)
		}
	}

	// No database configured at all.
	var none *bundle
	r := none.run(t, "list")
	if r.code != cli.ExitUsage || !strings.Contains(r.oneLine(t), "no database: pass --database-url or set DATABASE_URL") {
		t.Fatalf("no database: exit %d, %q", r.code, r.stderr)
	}
}

// TestRequeueWhileWorkersRun requeues failed tasks while a real worker runs
// on the same schema and holds other tasks: the running tasks are not
// touched, and the requeued ones run again to completion.
func TestRequeueWhileWorkersRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	handlers := worker.Handlers{
		// Fails its first attempt, succeeds once requeued.
		"flaky": func(ctx context.Context, task *worker.Task) error {
			if task.Attempt == 1 {
				return fmt.Errorf("upstream unavailable (attempt %d)", task.Attempt)
			}
			return nil
		},
		// Runs until the test lets it finish.
		"slow": func(ctx context.Context, task *worker.Task) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}
	w := worker.New(pgtest.NewPool(t, b.schema), worker.Config{
		Concurrency:    20,
		PollInterval:   50 * time.Millisecond,
		RescueInterval: 100 * time.Millisecond,
		HealthInterval: 100 * time.Millisecond,
		TaskTimeout:    time.Minute,
		RetryBackoff:   func(int) time.Duration { return 0 },
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx, handlers) }()
	t.Cleanup(func() {
		unblock()
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	var slow []int64
	for range 5 {
		id, err := b.client.Enqueue(ctx, "slow", nil)
		if err != nil {
			t.Fatal(err)
		}
		slow = append(slow, id.ID)
	}
	const flaky = 30
	for i := range flaky {
		if _, err := b.client.Enqueue(ctx, "flaky", map[string]int{"i": i}, queue.WithMaxAttempts(1)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 3*time.Second, "5 slow tasks running and 30 flaky ones failed", func() bool {
		return b.count(t, "name = 'slow' AND status = 'running'") == 5 && b.count(t, "name = 'flaky' AND status = 'failed'") == flaky
	})
	var runningBefore string
	if err := b.pool.QueryRow(ctx, `SELECT string_agg(format('%s:%s:%s:%s', id, attempt, worker_id, started_at), ' ' ORDER BY id)
		FROM skiplock_tasks WHERE status = 'running'`).Scan(&runningBefore); err != nil {
		t.Fatal(err)
	}

	// Naming a running task: not requeued, exit 3.
	r := b.run(t, "requeue", fmt.Sprint(slow[0]), "--json")
	if r.code != cli.ExitPartial || !strings.Contains(r.stderr, "running, not requeued") {
		t.Fatalf("requeue of a running task: exit %d, %q", r.code, r.stderr)
	}
	// Every failed task, in small batches, while the worker runs.
	var out changeOut
	b.run(t, "requeue", "--failed", "--batch-size", "7", "--yes", "--json").ok(t).decode(t, &out)
	if out.Count != flaky {
		t.Fatalf("requeued %d, want %d", out.Count, flaky)
	}
	waitFor(t, 3*time.Second, "the requeued tasks to complete", func() bool {
		return b.count(t, "name = 'flaky' AND status = 'completed' AND attempt = 2") == flaky
	})
	var runningAfter string
	if err := b.pool.QueryRow(ctx, `SELECT string_agg(format('%s:%s:%s:%s', id, attempt, worker_id, started_at), ' ' ORDER BY id)
		FROM skiplock_tasks WHERE status = 'running'`).Scan(&runningAfter); err != nil {
		t.Fatal(err)
	}
	if runningAfter != runningBefore {
		t.Fatalf("running tasks changed during the requeue:\nbefore %s\nafter  %s", runningBefore, runningAfter)
	}
	if n := b.count(t, "name = 'flaky' AND errors @> '[{\"outcome\": \"requeued\"}]'"); n != flaky {
		t.Fatalf("%d flaky tasks record the requeue, want %d", n, flaky)
	}

	unblock()
	waitFor(t, 3*time.Second, "the slow tasks to complete", func() bool {
		return b.count(t, "status = 'completed'") == flaky+5
	})
}

// TestPasswordNeverShown: a database URL's password appears in no output,
// whether the URL does not parse (pgx masks what it can tell is a password,
// not all of it: a key=value "password = x" escapes it), the server cannot
// be reached or does not resolve, or it refuses the login; from
// --database-url or DATABASE_URL, for any command.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	const secret = "s3cret"
	server, err := url.Parse(pgtest.Server(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	refused := *server
	refused.User = url.UserPassword("skiplock_no_such_role", secret)
	for _, c := range []struct {
		name, url string
		code      int
		want      string
	}{
		{"bad port", "postgres://u:s3cret@db.internal:notaport/app", cli.ExitUsage, "invalid database URL"},
		{"spaces around =", "host=db.internal port=x user=u password = s3cret", cli.ExitUsage, "invalid database URL"},
		{"quoted", "host=db.internal port=x password='s3cret and more'", cli.ExitUsage, "invalid database URL"},
		{"bad percent-encoding", "postgres://u:s3%cret@db.internal/app", cli.ExitUsage, "invalid database URL"},
		{"unreachable", "postgres://u:s3cret@127.0.0.1:1/app?connect_timeout=2", cli.ExitError, "cannot connect to the database at 127.0.0.1:1"},
		{"no such host", "postgres://u:s3cret@host.invalid/app?connect_timeout=2", cli.ExitError, "cannot connect to the database at host.invalid:5432"},
		{"login refused", refused.String(), cli.ExitError, `role "skiplock_no_such_role" does not exist`},
	} {
		for _, args := range [][]string{
			{"list", "--database-url", c.url},
			{"migrate", "up", "--database-url", c.url},
			{"enqueue", "x", "--database-url", c.url},
		} {
			r := (*bundle)(nil).run(t, args...)
			if r.code != c.code || !strings.Contains(r.oneLine(t), c.want) {
				t.Errorf("%s, %s: exit %d, %q; want %d, %q", c.name, args[0], r.code, r.stderr, c.code, c.want)
			}
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("%s, %s: the output shows the password: %q %q", c.name, args[0], r.stdout, r.stderr)
			}
		}
		r := (*bundle)(nil).runEnv(t, cli.Env{Getenv: func(k string) string {
			if k == "DATABASE_URL" {
				return c.url
			}
			return ""
		}}, "stats")
		if r.code != c.code || strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("%s, from DATABASE_URL: exit %d, %q", c.name, r.code, r.stderr)
		}
	}
}
