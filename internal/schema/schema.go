// Package schema is what queue, worker and the skiplock command need to
// know about skiplock's tables beyond their statements (package db): where
// they are and whether this build can use them (Read, Check), the class of
// the task advisory locks (Info.TableOID), the NOTIFY channels named after
// the schema (Channels), and how a payload is stored (EncodePayload).
//
// It is plumbing, not API: users see its effects through queue (for
// example ErrNotMigrated) and worker (which refuses to start on a schema
// Check rejects).
package schema

import (
	"context"
	"errors"
	"fmt"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/migrations"
)

// Info describes where skiplock lives in the database.
type Info struct {
	// Name is the schema that holds skiplock_tasks, found through the
	// search_path.
	Name string
	// Version is the newest migration applied: skiplock_schema_version(),
	// whichever tool applied the migrations, or for a schema older than
	// migration 6 the version in skiplock_schema_migrations (0 when that
	// table is missing too: applied by another tool, version unknown).
	Version uint
	// Dirty is set when skiplock's own runner recorded a migration that
	// failed part way.
	Dirty bool
	// TableOID is skiplock_tasks' OID: the class of its task advisory locks.
	TableOID int64
}

// Read finds skiplock's tables through the search_path of conn (a pool, a
// connection or a transaction) and reads the schema's version. It returns
// pgerr.ErrNotMigrated when they are missing, as a *pgerr.NoSchemaError
// when no schema of the search_path exists, and an error wrapping
// pgerr.ErrPermissionDenied when the role has no USAGE on the first.
func Read(ctx context.Context, conn pgerr.Executor) (Info, error) {
	queries := db.New()
	conn = pgerr.Interpreting(conn)
	table, err := queries.SchemaTaskTable(ctx, conn)
	if errors.Is(err, pgerr.ErrNotFound) {
		path, err := queries.SchemaSearchPath(ctx, conn)
		if err != nil {
			return Info{}, fmt.Errorf("finding skiplock's schema: %w", err)
		}
		// A schema the role may not use is skipped as if missing: say so
		// rather than ask for a migration or a schema that exists.
		if first := pgerr.FirstSchema(path.SearchPath, path.UserName); first != "" {
			s, err := queries.SchemaUsable(ctx, conn, first)
			if err != nil {
				return Info{}, fmt.Errorf("finding skiplock's schema: %w", err)
			}
			if s.SchemaExists && !s.Usable {
				return Info{}, pgerr.NoUsage(first, path.UserName)
			}
		}
		if !path.SchemaExists {
			return Info{}, pgerr.NoSchema(path.SearchPath, path.UserName)
		}
		return Info{}, fmt.Errorf("%w (table skiplock_tasks not found in search_path)", pgerr.ErrNotMigrated)
	}
	if err != nil {
		return Info{}, fmt.Errorf("finding skiplock's schema: %w", err)
	}
	info := Info{Name: table.Schema, TableOID: table.Oid}
	src, err := queries.SchemaVersionSources(ctx, conn)
	if err != nil {
		return Info{}, fmt.Errorf("reading the schema version: %w", err)
	}
	if src.HasTable {
		v, err := queries.SchemaVersion(ctx, conn)
		switch {
		case errors.Is(err, pgerr.ErrNotFound):
		case err != nil:
			return Info{}, fmt.Errorf("reading the schema version: %w", err)
		default:
			info.Version, info.Dirty = uint(max(v.Version, 0)), v.Dirty
		}
	}
	if src.HasFunction {
		v, err := queries.SchemaVersionStamp(ctx, conn)
		if err != nil {
			return Info{}, fmt.Errorf("reading the schema version: %w", err)
		}
		// A failed migration leaves the function as its predecessor set
		// it, so the function is the truth; the runner's table adds dirty.
		info.Version = uint(max(v, 0))
	}
	return info, nil
}

// Check returns nil when info is a schema this build can use, and
// otherwise an error wrapping pgerr.ErrNotMigrated that names the missing
// migration.
func Check(info Info) error {
	switch {
	case info.Dirty:
		return fmt.Errorf("%w (schema %s at version %d, dirty: a migration failed part way; fix it, then migrate up)",
			pgerr.ErrNotMigrated, info.Name, info.Version)
	case info.Version == 0:
		return fmt.Errorf("%w (schema %s has skiplock_tasks but neither skiplock_schema_version() nor a version in "+
			"skiplock_schema_migrations: migrations before %06d were applied by another tool; apply %06d through %06d)",
			pgerr.ErrNotMigrated, info.Name, stampVersion, stampVersion, migrations.Latest)
	case info.Version < migrations.Latest:
		return fmt.Errorf("%w (schema %s at version %d; this build needs %d: apply the migrations after %d)",
			pgerr.ErrNotMigrated, info.Name, info.Version, migrations.Latest, info.Version)
	}
	return nil
}

// stampVersion is the migration that introduced skiplock_schema_version().
const stampVersion = 6
