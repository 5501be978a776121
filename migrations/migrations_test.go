package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, pgtest.Schema(t, false))

	tables := func() int {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables
			WHERE schemaname = current_schema() AND tablename IN ('skiplock_tasks', 'skiplock_workers', 'skiplock_audit')`).Scan(&n)
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
		if n := tables(); n != 3 {
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

// TestReadyWhicheverToolApplied: the files applied as any tool applies them
// (plain SQL, no skiplock_schema_migrations) give a schema the worker and
// producers accept; a schema short of the latest migration gets an error
// naming its version.
func TestReadyWhicheverToolApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	apply := func(t *testing.T, pool *pgxpool.Pool, upTo uint) {
		for _, v := range migrations.Versions() {
			if v > upTo {
				break
			}
			names, _ := fs.Glob(migrations.FS(), fmt.Sprintf("%06d_*.up.sql", v))
			sql, err := fs.ReadFile(migrations.FS(), names[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, string(sql)); err != nil {
				t.Fatalf("%s: %v", names[0], err)
			}
		}
	}

	pool := pgtest.NewPool(t, pgtest.Schema(t, false))
	apply(t, pool, migrations.Latest)
	info, err := schema.Read(ctx, pool)
	if err != nil || info.Version != migrations.Latest || schema.Check(info) != nil {
		t.Fatalf("plain SQL: %+v, %v, %v", info, err, schema.Check(info))
	}
	var table *string
	pool.QueryRow(ctx, "SELECT to_regclass('skiplock_schema_migrations')::text").Scan(&table)
	if table != nil {
		t.Fatalf("plain SQL created %s", *table)
	}

	old := pgtest.NewPool(t, pgtest.Schema(t, false))
	apply(t, old, 4)
	info, _ = schema.Read(ctx, old)
	if err := schema.Check(info); !errors.Is(err, migrations.ErrNotMigrated) || !strings.Contains(err.Error(), "skiplock_schema_version()") {
		t.Fatalf("schema before 6 by another tool: %v", err)
	}

	byRunner := pgtest.NewPool(t, pgtest.Schema(t, false))
	if err := migrations.Steps(ctx, byRunner, 4); err != nil {
		t.Fatal(err)
	}
	info, _ = schema.Read(ctx, byRunner)
	want := fmt.Sprintf("at version 4; this build needs %d", migrations.Latest)
	if err := schema.Check(info); !errors.Is(err, migrations.ErrNotMigrated) || !strings.Contains(err.Error(), want) {
		t.Fatalf("schema at 4: %v, want %q", err, want)
	}
}

// TestStepsKeepStamp: at every version that stepping down one migration at
// a time passes through, to 0, and up again one at a time, the schema's own
// stamp agrees with the version golang-migrate recorded: from migration 6
// on skiplock_schema_version() returns it, before 6 the function is absent
// (the tool's table is the only record). schema.Read reads that version and
// schema.Check accepts the schema at the latest only.
func TestStepsKeepStamp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const stampFrom = 6 // the migration that introduced the stamp
	pool := pgtest.NewPool(t, pgtest.Schema(t, false))

	check := func(step string) uint {
		t.Helper()
		recorded, dirty, err := migrations.Version(ctx, pool)
		if err != nil || dirty {
			t.Fatalf("%s: version %d, dirty %v, %v", step, recorded, dirty, err)
		}
		var stamp *int64
		var exists bool
		if err := pool.QueryRow(ctx, "SELECT to_regprocedure('skiplock_schema_version()') IS NOT NULL").Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			if err := pool.QueryRow(ctx, "SELECT skiplock_schema_version()").Scan(&stamp); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
		}
		switch {
		case recorded >= stampFrom && (stamp == nil || *stamp != int64(recorded)):
			t.Fatalf("%s: golang-migrate recorded %d, skiplock_schema_version() = %v", step, recorded, ptrString(stamp))
		case recorded < stampFrom && stamp != nil:
			t.Fatalf("%s: golang-migrate recorded %d, yet skiplock_schema_version() = %d", step, recorded, *stamp)
		}

		info, err := schema.Read(ctx, pool)
		if recorded == 0 {
			if !errors.Is(err, migrations.ErrNotMigrated) {
				t.Fatalf("%s: at version 0 schema.Read = %+v, %v", step, info, err)
			}
			return 0
		}
		if err != nil || info.Version != recorded {
			t.Fatalf("%s: golang-migrate recorded %d, schema.Read = %+v, %v", step, recorded, info, err)
		}
		if ok := schema.Check(info) == nil; ok != (recorded == migrations.Latest) {
			t.Fatalf("%s: at version %d (latest %d) schema.Check = %v", step, recorded, migrations.Latest, schema.Check(info))
		}
		return recorded
	}

	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	seen := []uint{check("up")}
	for seen[len(seen)-1] > 0 {
		if err := migrations.Steps(ctx, pool, -1); err != nil {
			t.Fatalf("down one step from %d: %v", seen[len(seen)-1], err)
		}
		seen = append(seen, check(fmt.Sprintf("down from %d", seen[len(seen)-1])))
	}
	for range migrations.Versions() {
		if err := migrations.Steps(ctx, pool, 1); err != nil {
			t.Fatalf("up one step from %d: %v", seen[len(seen)-1], err)
		}
		seen = append(seen, check(fmt.Sprintf("up from %d", seen[len(seen)-1])))
	}
	if want := len(migrations.Versions())*2 + 1; len(seen) != want || seen[len(seen)-1] != migrations.Latest {
		t.Fatalf("versions passed through: %v", seen)
	}
}

func ptrString(p *int64) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}

// TestNoSuchSchema: on a search_path whose schema does not exist, migrating,
// reading the schema and starting a worker all fail with one error that
// names the schema and the statement that creates it, and that statement,
// run as told, lets migrations.Up succeed.
func TestNoSuchSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := pgtest.NewPool(t, "public")
	name := pgtest.Schema(t, false)
	if _, err := admin.Exec(ctx, "DROP SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+name) }) // for pgtest's drop
	pool := pgtest.NewPool(t, name)

	create := fmt.Sprintf(`CREATE SCHEMA "%s"`, name)
	want := func(what string, err error) {
		t.Helper()
		var noSchema *queue.NoSchemaError
		if !errors.As(err, &noSchema) || !errors.Is(err, migrations.ErrNotMigrated) || noSchema.Schema != name ||
			!strings.Contains(err.Error(), fmt.Sprintf(`schema %q does not exist`, name)) || !strings.Contains(err.Error(), create) {
			t.Fatalf("%s on a missing schema: %v", what, err)
		}
	}
	want("migrations.Up", migrations.Up(ctx, pool))
	_, _, err := migrations.Version(ctx, pool)
	want("migrations.Version", err)
	_, err = ops.Schema(ctx, queue.New(pool))
	want("ops.Schema", err)
	runCtx, cancel := context.WithTimeout(ctx, pgtest.Patient(5*time.Second))
	defer cancel()
	w := worker.New(pool, worker.Config{Logger: slog.New(slog.DiscardHandler)})
	want("worker.Run", w.Run(runCtx, worker.Handlers{"x": func(context.Context, *worker.Task) error { return nil }}))

	if _, err := admin.Exec(ctx, create); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("after %s: %v", create, err)
	}
}

// TestOtherToolSchema: on a schema that another tool migrated (here plain
// SQL), Up has nothing to do and leaves it as it is, where golang-migrate
// alone would apply migration 1 again, fail and mark the schema dirty;
// Down and Steps refuse to revert files by a record that does not exist.
func TestOtherToolSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, pgtest.Schema(t, false))
	for _, v := range migrations.Versions() {
		names, _ := fs.Glob(migrations.FS(), fmt.Sprintf("%06d_*.up.sql", v))
		sql, _ := fs.ReadFile(migrations.FS(), names[0])
		if _, err := pool.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("%s: %v", names[0], err)
		}
	}
	usable := func(step string) {
		t.Helper()
		info, err := schema.Read(ctx, pool)
		if err != nil || info.Dirty || schema.Check(info) != nil {
			t.Fatalf("after %s: %+v, %v, %v", step, info, err, schema.Check(info))
		}
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("Up on a current schema another tool applied: %v", err)
	}
	usable("Up")
	for _, step := range []struct {
		name string
		run  func() error
	}{
		{"Down", func() error { return migrations.Down(ctx, pool) }},
		{"Steps(-1)", func() error { return migrations.Steps(ctx, pool, -1) }},
	} {
		err := step.run()
		want := fmt.Sprintf("the schema is at version %d (skiplock_schema_version()) but skiplock_schema_migrations records no version", migrations.Latest)
		if !errors.Is(err, migrations.ErrOtherTool) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want ErrOtherTool: %q", step.name, err, want)
		}
		usable(step.name)
	}
}
