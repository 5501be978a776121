// Package pgtest hands each test an isolated, migrated schema on a real
// PostgreSQL server: the one in TEST_DATABASE_URL or DATABASE_URL, else a
// local server, else a throwaway cluster booted from the installed binaries
// (see internal/devpg). It never skips: without PostgreSQL, tests fail and
// say what to install.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pool := pgtest.Pool(t)  // search_path = a fresh schema, migrated
//		...
//	}
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/devpg"
	"github.com/skiplock/skiplock/internal/testschema"
	"github.com/skiplock/skiplock/migrations"
)

// schemaPrefix marks test schemas; the number after it is the creation time,
// so that a later run can sweep schemas that a killed run left behind.
const schemaPrefix = "sltest_"

var server struct {
	once sync.Once
	srv  *devpg.Server
	err  error
}

// Main runs the package's tests and then stops a throwaway server, if one
// was booted. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if server.srv != nil {
		server.srv.Close()
	}
	os.Exit(code)
}

// Server returns the server the tests run on, finding or booting it once.
func Server(tb testing.TB) *devpg.Server {
	tb.Helper()
	server.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		server.srv, server.err = devpg.Find(ctx, devpg.Options{
			EnvVars: []string{"TEST_DATABASE_URL", "DATABASE_URL"},
			Log:     os.Stderr,
		})
		if server.err == nil {
			server.err = testschema.DropStale(ctx, server.srv.URL, schemaPrefix, time.Hour)
		}
		if server.err == nil {
			server.err = dropStaleRoles(ctx, server.srv.URL, time.Hour)
		}
	})
	if server.err != nil {
		tb.Fatalf("pgtest: %v", server.err)
	}
	return server.srv
}

// Schema creates a fresh schema, migrated unless migrate is false, and
// drops it when the test ends. It returns the schema's name.
func Schema(tb testing.TB, migrate bool) string {
	tb.Helper()
	srv := Server(tb)
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := testschema.Name(schemaPrefix, hex.EncodeToString(b[:]))

	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		tb.Fatalf("pgtest: connecting: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("pgtest: creating schema: %v", err)
	}
	tb.Cleanup(func() {
		conn, err := pgx.Connect(ctx, srv.URL)
		if err != nil {
			tb.Errorf("pgtest: dropping schema: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			tb.Errorf("pgtest: dropping schema %s: %v", name, err)
		}
	})
	if migrate {
		pool := NewPool(tb, name)
		if err := migrations.Up(ctx, pool); err != nil {
			tb.Fatalf("pgtest: migrating %s: %v", name, err)
		}
		pool.Close()
	}
	return name
}

// Config returns a pool config whose connections use schema.
func Config(tb testing.TB, schema string) *pgxpool.Config {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(Server(tb).URL)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	return cfg
}

// SchemaURL is the server's URL with schema as its search_path, the
// standard parameter that pgx and libpq pass on to the server: for
// connections the test does not open itself (a child process, a command
// under test).
func SchemaURL(tb testing.TB, schema string) string {
	tb.Helper()
	base := Server(tb).URL
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return base + " search_path=" + schema // key=value form
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// NewPool opens a pool on schema, closed when the test ends. Tests that
// need several independent pools on one schema (two workers, say) call it
// more than once.
func NewPool(tb testing.TB, schema string) *pgxpool.Pool {
	tb.Helper()
	return PoolFromConfig(tb, Config(tb, schema))
}

// PoolFromConfig opens a pool from cfg, closed when the test ends.
func PoolFromConfig(tb testing.TB, cfg *pgxpool.Config) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Pool returns a pool on a fresh migrated schema.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return NewPool(tb, Schema(tb, true))
}

// InsertTask adds a task in any status, as a worker would have left it, and
// returns its ID: run by worker "w1" unless pending, started a minute ago
// when attempt > 0, finished now when completed, failed or cancelled, with
// errs (a JSON array) as its error history. Tests of the operator tools
// read and change such tasks without running workers.
func InsertTask(tb testing.TB, pool *pgxpool.Pool, queueName, name, status string, attempt, maxAttempts int, errs string) int64 {
	tb.Helper()
	var id int64
	err := pool.QueryRow(context.Background(), `
		INSERT INTO skiplock_tasks (queue, name, status, attempt, max_attempts, errors, worker_id, started_at, finished_at)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb,
		        CASE WHEN $3 = 'pending' THEN NULL ELSE 'w1' END,
		        CASE WHEN $4 > 0 THEN now() - interval '1 minute' END,
		        CASE WHEN $3 IN ('completed', 'failed', 'cancelled') THEN now() END)
		RETURNING id`, queueName, name, status, attempt, maxAttempts, errs).Scan(&id)
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// HoldTaskRow locks the row of task id in a transaction of conn, as an
// operator's change does while it runs, and returns the transaction: the
// row is held until the test rolls it back, or ends.
func HoldTaskRow(tb testing.TB, conn *pgx.Conn, id int64) pgx.Tx {
	tb.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { tx.Rollback(ctx) }) //nolint:errcheck // done already, or the test failed
	if _, err := tx.Exec(ctx, "SELECT 1 FROM skiplock_tasks WHERE id = $1 FOR UPDATE", id); err != nil {
		tb.Fatal(err)
	}
	return tx
}

// panicTB lets examples, which get no testing.TB, use the helpers: a
// failure panics with its message.
type panicTB struct {
	testing.TB
	cleanups []func()
}

func (p *panicTB) Helper()                        {}
func (p *panicTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (p *panicTB) Errorf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (p *panicTB) Cleanup(f func())               { p.cleanups = append(p.cleanups, f) }
func (p *panicTB) Logf(string, ...any)            {} // Eventually's note on a slow wait

// ExampleTB returns a testing.TB for an Example function, which gets none:
// a failure panics with its message; done runs its cleanups.
func ExampleTB() (tb testing.TB, done func()) {
	p := &panicTB{}
	return p, func() {
		for i := len(p.cleanups) - 1; i >= 0; i-- {
			p.cleanups[i]()
		}
	}
}

// ExamplePool returns a pool on a fresh migrated schema for an Example
// function, and a func that drops it. It panics on failure.
func ExamplePool() (*pgxpool.Pool, func()) {
	tb := &panicTB{}
	pool := Pool(tb)
	return pool, func() {
		for i := len(tb.cleanups) - 1; i >= 0; i-- {
			tb.cleanups[i]()
		}
	}
}

// Patient turns how long a wait takes on an idle machine into the deadline
// a test gives it. Tests assert outcomes, never speed: on a busy 2-core
// machine (CI beside other builds, -race) waits take many times longer, so
// a deadline is there only to catch a hang. It is 20 times expect, and at
// least two minutes.
func Patient(expect time.Duration) time.Duration {
	return max(20*expect, 2*time.Minute)
}

// Eventually polls cond every 10ms until it holds and fails tb if it still
// does not after Patient(within). within is how long the wait takes on an
// idle machine; a wait longer than that is logged, not failed. what names
// the condition in both messages. It is the one "poll until" for tests:
// they wait for an outcome, never for a fixed time.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	began := time.Now()
	patience := Patient(within)
	for !cond() {
		if time.Since(began) > patience {
			tb.Fatalf("timed out after %s waiting for %s", patience, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(began); d > within {
		tb.Logf("waited %s for %s (%s on an idle machine)", d.Round(time.Millisecond), what, within)
	}
}
