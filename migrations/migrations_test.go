package migrations_test

import (
	"context"
	"testing"

	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, pgtest.Schema(t, false))

	tables := func() int {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables
			WHERE schemaname = current_schema() AND tablename IN ('skiplock_tasks', 'skiplock_workers')`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	version := func() (uint, bool) {
		v, dirty, err := migrations.Version(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		return v, dirty
	}

	if v, _ := version(); v != 0 {
		t.Fatalf("fresh schema at version %d", v)
	}
	for round := range 2 {
		if err := migrations.Up(ctx, pool); err != nil {
			t.Fatalf("up (round %d): %v", round, err)
		}
		if v, dirty := version(); v != migrations.Latest || dirty {
			t.Fatalf("after up: version %d dirty %v, want %d", v, dirty, migrations.Latest)
		}
		if n := tables(); n != 2 {
			t.Fatalf("after up: %d tables", n)
		}
		if err := migrations.Up(ctx, pool); err != nil { // idempotent
			t.Fatal(err)
		}
		if err := migrations.Down(ctx, pool); err != nil {
			t.Fatalf("down (round %d): %v", round, err)
		}
		if n := tables(); n != 0 {
			t.Fatalf("after down: %d tables left", n)
		}
		var fns int
		pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE pronamespace = current_schema()::regnamespace`).Scan(&fns)
		if fns != 0 {
			t.Fatalf("after down: %d functions left", fns)
		}
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
}

func TestVersions(t *testing.T) {
	v := migrations.Versions()
	if len(v) == 0 || v[len(v)-1] != migrations.Latest {
		t.Fatalf("Versions() = %v, Latest = %d", v, migrations.Latest)
	}
}
