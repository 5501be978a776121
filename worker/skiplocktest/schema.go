package skiplocktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testschema"
	"github.com/skiplock/skiplock/migrations"
)

// SchemaPrefix starts the name of every schema Schema creates; the number
// after it is the creation time, so that a later run can drop what a killed
// run left behind.
const SchemaPrefix = "skiplocktest_"

// StaleSchemaAge is how old a schema of SchemaPrefix must be before Schema
// drops it as a killed run's leftover.
const StaleSchemaAge = time.Hour

var swept sync.Map // url -> struct{}: leftovers dropped once per process

// Schema creates a fresh schema in the database at url, migrates it, and
// returns a pool whose connections have it as their search_path: the
// test's own skiplock, which tests running in parallel do not see (their
// NOTIFY channels carry the schema's name too). At the end of the test the
// pool is closed and the schema dropped. An empty url falls back to
// TEST_DATABASE_URL, then DATABASE_URL. The first call for a url in a
// process also drops schemas of SchemaPrefix older than StaleSchemaAge.
// It fails t with Fatalf when the database cannot be reached or migrated.
func Schema(t TB, url string) *pgxpool.Pool {
	t.Helper()
	if url == "" {
		url = os.Getenv("TEST_DATABASE_URL")
	}
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	if url == "" {
		t.Fatalf("skiplocktest: no database: pass a URL, or set TEST_DATABASE_URL or DATABASE_URL")
		return nil
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("skiplocktest: database URL: %v", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, done := swept.LoadOrStore(url, struct{}{}); !done {
		if err := testschema.DropStale(ctx, url, SchemaPrefix, StaleSchemaAge); err != nil {
			t.Errorf("skiplocktest: dropping leftover schemas: %v", err)
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := testschema.Name(SchemaPrefix, hex.EncodeToString(b[:]))
	quoted := pgx.Identifier{name}.Sanitize()

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("skiplocktest: connecting: %v", err)
		return nil
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
		t.Fatalf("skiplocktest: creating schema %s: %v", name, err)
		return nil
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("skiplocktest: dropping schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+quoted+" CASCADE"); err != nil {
			t.Errorf("skiplocktest: dropping schema %s: %v", name, err)
		}
	})

	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("skiplocktest: %v", err)
		return nil
	}
	// Registered after the drop, so it runs first: the pool's connections
	// are gone when the schema is dropped.
	t.Cleanup(pool.Close)
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("skiplocktest: migrating schema %s: %v", name, err)
		return nil
	}
	return pool
}
