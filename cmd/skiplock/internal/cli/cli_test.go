package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is what a test works with: a schema, a pool on it, and the
// database URL that points the command at it.
type bundle struct {
	schema string
	pool   *pgxpool.Pool
	client *queue.Client
	url    string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupSchema(t, pgtest.Schema(t, true))
}

func setupSchema(t *testing.T, schema string) *bundle {
	t.Helper()
	pool := pgtest.NewPool(t, schema)
	return &bundle{schema: schema, pool: pool, client: queue.New(pool), url: pgtest.SchemaURL(t, schema)}
}

// result is what one run of the command did.
type result struct {
	code   int
	stdout string
	stderr string
}

// run runs the command on the bundle's schema, with no terminal.
func (b *bundle) run(t *testing.T, args ...string) result {
	t.Helper()
	return b.runEnv(t, cli.Env{}, args...)
}

// runEnv runs the command with env; its streams are captured, and the
// database URL comes from DATABASE_URL unless args give --database-url.
func (b *bundle) runEnv(t *testing.T, env cli.Env, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env.Stdout, env.Stderr = &stdout, &stderr
	if env.Getenv == nil {
		env.Getenv = func(k string) string {
			if k == "DATABASE_URL" && b != nil {
				return b.url
			}
			return ""
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := cli.Run(ctx, args, env)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// ok fails the test unless the run exited 0.
func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	return r
}

// decode parses the run's --json output into v.
func (r result) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("decoding %q: %v (stderr: %s)", r.stdout, err, r.stderr)
	}
}

// oneLine checks that stderr is a single line starting "skiplock: ".
func (r result) oneLine(t *testing.T) string {
	t.Helper()
	line := strings.TrimSuffix(r.stderr, "\n")
	if line == "" || strings.Contains(line, "\n") || !strings.HasPrefix(line, "skiplock: ") {
		t.Fatalf("stderr is not one line starting with \"skiplock: \": %q", r.stderr)
	}
	return line
}

func (b *bundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock_tasks WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// insert adds a task in any state, as a worker would have left it.
func (b *bundle) insert(t *testing.T, queueName, name string, status queue.Status, attempt, maxAttempts int, lastError string) int64 {
	t.Helper()
	errs := "[]"
	if lastError != "" {
		errs = fmt.Sprintf(`[{"attempt":%d,"outcome":"error","error":%q,"worker_id":"w1","host":"box","pid":7,
			"started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z"}]`, attempt, lastError)
	}
	return pgtest.InsertTask(t, b.pool, queueName, name, string(status), attempt, maxAttempts, errs)
}

func (b *bundle) status(t *testing.T, id int64) queue.Status {
	t.Helper()
	task, err := b.client.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return task.Status
}

// snapshot is every task's id, status, attempt and history length: what
// a command that must change nothing must leave as it was.
func (b *bundle) snapshot(t *testing.T) string {
	t.Helper()
	var s string
	err := b.pool.QueryRow(context.Background(), `
		SELECT coalesce(string_agg(format('%s:%s:%s:%s:%s', id, status, attempt, max_attempts, jsonb_array_length(errors)), ' ' ORDER BY id), '')
		FROM skiplock_tasks`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitFor is pgtest.Eventually: within is how long cond takes to hold on
// an idle machine, and a hang fails after pgtest.Patient(within).
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	pgtest.Eventually(t, within, what, cond)
}
