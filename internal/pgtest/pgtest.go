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
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/devpg"
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
			server.err = devpg.DropStaleSchemas(ctx, server.srv.URL, schemaPrefix, time.Hour)
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
	name := devpg.SchemaName(schemaPrefix, hex.EncodeToString(b[:]))

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
