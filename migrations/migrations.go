package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Table is where golang-migrate records the schema version.
const Table = "skiplock_schema_migrations"

//go:embed *.sql
var files embed.FS

// FS returns the migration files.
func FS() fs.FS { return files }

// Latest is the newest migration version this build of skiplock knows.
var Latest = latest()

func latest() uint {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(err)
	}
	var max uint
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(prefix, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("migrations: bad file name %q", e.Name()))
		}
		max = uint(v)
	}
	return max
}

// Versions lists every migration version in order.
func Versions() []uint {
	entries, _ := fs.ReadDir(files, ".")
	seen := map[uint]bool{}
	var out []uint
	for _, e := range entries {
		prefix, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.ParseUint(prefix, 10, 64)
		if err == nil && !seen[uint(v)] {
			seen[uint(v)] = true
			out = append(out, uint(v))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Up applies every migration not applied yet, one at a time, building the
// indexes a migration marks as concurrent right after it (see
// concurrentMarker). It is a no-op when the schema is current. When no schema of the search_path exists it returns a
// *queue.NoSchemaError naming the schema to create. On a schema that
// another tool migrated (see ErrOtherTool) it does nothing when the schema
// is current, and otherwise returns ErrOtherTool.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	if current, err := checkRecorded(ctx, pool, true); current || err != nil {
		return err
	}
	return run(ctx, pool, func(m *migrate.Migrate) error { return stepUp(ctx, pool, m, -1) })
}

// Down reverts every migration, dropping skiplock's tables and their data.
// It returns ErrOtherTool on a schema that another tool migrated.
func Down(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := checkRecorded(ctx, pool, false); err != nil {
		return err
	}
	return run(ctx, pool, func(m *migrate.Migrate) error { return m.Down() })
}

// Steps applies n migrations up (n > 0) or reverts -n (n < 0). Like Up and
// Down, it leaves a schema that another tool migrated to that tool.
func Steps(ctx context.Context, pool *pgxpool.Pool, n int) error {
	if current, err := checkRecorded(ctx, pool, n > 0); current || err != nil {
		return err
	}
	return run(ctx, pool, func(m *migrate.Migrate) error {
		if n > 0 {
			return stepUp(ctx, pool, m, n)
		}
		return m.Steps(n)
	})
}

// ErrNotMigrated is wrapped by the error of every call of skiplock's
// packages (queue, worker, worker/lock) that finds skiplock's tables
// missing from the search_path, or a schema older than this build: run
// `skiplock migrate up`, or Up. When no schema of the search_path exists
// at all the error is a *queue.NoSchemaError naming the schema to create;
// it wraps ErrNotMigrated too.
//
//	if errors.Is(err, migrations.ErrNotMigrated) { ... }
var ErrNotMigrated = pgerr.ErrNotMigrated

// ErrOtherTool is returned by Up, Down and Steps for a schema whose own
// version (skiplock_schema_version(), from migration 6 on) is not the one
// recorded in skiplock_schema_migrations: another tool applied its
// migrations. golang-migrate, going by its table, would apply migration 1
// again (failing, and leaving the schema dirty) or revert the wrong files.
var ErrOtherTool = errors.New("another tool applied the migrations: keep applying them with it (skiplock migrate sql prints the SQL)")

// checkRecorded returns ErrOtherTool when the schema's stamp and the
// runner's record disagree, unless up and the schema is current (then
// current is set: nothing to do).
func checkRecorded(ctx context.Context, pool *pgxpool.Pool, up bool) (current bool, err error) {
	q, x := db.New(), pgerr.Interpreting(pool)
	src, err := q.SchemaVersionSources(ctx, x)
	if err != nil || !src.HasFunction {
		// Before 6 the runner's table is the only record.
		return false, err
	}
	stamp, err := q.SchemaVersionStamp(ctx, x)
	if err != nil {
		return false, err
	}
	recorded := "no version"
	if src.HasTable {
		v, err := q.SchemaVersion(ctx, x)
		switch {
		case errors.Is(err, pgerr.ErrNotFound):
		case err != nil:
			return false, err
		case v.Dirty || v.Version == stamp:
			return false, nil // golang-migrate reports dirty itself
		default:
			recorded = fmt.Sprintf("version %d", v.Version)
		}
	}
	if up && stamp >= int64(Latest) {
		return true, nil
	}
	return false, fmt.Errorf("migrations: the schema is at version %d (skiplock_schema_version()) but %s records %s: %w",
		stamp, Table, recorded, ErrOtherTool)
}

// Version reports the applied version (0 when none) and whether a failed
// migration left the schema dirty.
func Version(ctx context.Context, pool *pgxpool.Pool) (version uint, dirty bool, err error) {
	err = run(ctx, pool, func(m *migrate.Migrate) error {
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return nil
		}
		return err
	})
	return version, dirty, err
}

func run(ctx context.Context, pool *pgxpool.Pool, fn func(*migrate.Migrate) error) error {
	// With no schema of the search_path in existence there is nowhere to
	// put the tables, and golang-migrate fails scanning current_schema().
	path, err := db.New().SchemaSearchPath(ctx, pgerr.Interpreting(pool))
	if err != nil {
		return fmt.Errorf("migrations: connecting: %w", err)
	}
	if !path.SchemaExists {
		return pgerr.NoSchema(path.SearchPath, path.UserName)
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()

	driver, err := pgxmigrate.WithInstance(sqlDB, &pgxmigrate.Config{MigrationsTable: Table})
	if err != nil {
		return fmt.Errorf("migrations: connecting: %w", err)
	}
	src, err := iofs.New(runnerFiles, ".")
	if err != nil {
		return fmt.Errorf("migrations: reading embedded files: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	defer m.Close()

	// golang-migrate takes no context; its graceful stop ends a run between
	// two migrations, never inside one.
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			select {
			case m.GracefulStop <- true:
			default:
			}
		case <-done:
		}
	}()

	if err := fn(m); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrations: %w", err)
	}
	return ctx.Err()
}
