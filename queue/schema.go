package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/migrations"
)

// SchemaInfo describes where skiplock lives in the database.
type SchemaInfo struct {
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

// Schema finds skiplock's tables through the search_path and reads the
// schema's version. It returns ErrNotMigrated when they are missing, as a
// *NoSchemaError when no schema of the search_path exists.
func (c *Client) Schema(ctx context.Context) (SchemaInfo, error) {
	return ReadSchema(ctx, c.pool)
}

// ReadSchema is Client.Schema on any connection, pool or transaction.
func ReadSchema(ctx context.Context, conn Executor) (SchemaInfo, error) {
	queries := db.New()
	conn = pgerr.Interpreting(conn)
	table, err := queries.SchemaTaskTable(ctx, conn)
	if errors.Is(err, pgerr.ErrNotFound) {
		path, err := queries.SchemaSearchPath(ctx, conn)
		switch {
		case err != nil:
			return SchemaInfo{}, fmt.Errorf("finding skiplock's schema: %w", err)
		case !path.SchemaExists:
			return SchemaInfo{}, pgerr.NoSchema(path.SearchPath, path.UserName)
		}
		return SchemaInfo{}, fmt.Errorf("%w (table skiplock_tasks not found in search_path)", ErrNotMigrated)
	}
	if err != nil {
		return SchemaInfo{}, fmt.Errorf("finding skiplock's schema: %w", err)
	}
	info := SchemaInfo{Name: table.Schema, TableOID: table.Oid}
	src, err := queries.SchemaVersionSources(ctx, conn)
	if err != nil {
		return SchemaInfo{}, fmt.Errorf("reading the schema version: %w", err)
	}
	if src.HasTable {
		v, err := queries.SchemaVersion(ctx, conn)
		switch {
		case errors.Is(err, pgerr.ErrNotFound):
		case err != nil:
			return SchemaInfo{}, fmt.Errorf("reading the schema version: %w", err)
		default:
			info.Version, info.Dirty = uint(max(v.Version, 0)), v.Dirty
		}
	}
	if src.HasFunction {
		v, err := queries.SchemaVersionStamp(ctx, conn)
		if err != nil {
			return SchemaInfo{}, fmt.Errorf("reading the schema version: %w", err)
		}
		// A failed migration leaves the function as its predecessor set
		// it, so the function is the truth; the runner's table adds dirty.
		info.Version = uint(max(v, 0))
	}
	return info, nil
}

// CheckSchema returns nil when info is a schema this build can use, and
// otherwise an error wrapping ErrNotMigrated that names the missing
// migration.
func CheckSchema(info SchemaInfo) error {
	switch {
	case info.Dirty:
		return fmt.Errorf("%w (schema %s at version %d, dirty: a migration failed part way; fix it, then migrate up)",
			ErrNotMigrated, info.Name, info.Version)
	case info.Version == 0:
		return fmt.Errorf("%w (schema %s has skiplock_tasks but neither skiplock_schema_version() nor a version in "+
			"skiplock_schema_migrations: migrations before %06d were applied by another tool; apply %06d through %06d)",
			ErrNotMigrated, info.Name, stampVersion, stampVersion, migrations.Latest)
	case info.Version < migrations.Latest:
		return fmt.Errorf("%w (schema %s at version %d; this build needs %d: apply the migrations after %d)",
			ErrNotMigrated, info.Name, info.Version, migrations.Latest, info.Version)
	}
	return nil
}

// stampVersion is the migration that introduced skiplock_schema_version().
const stampVersion = 6

// Channels returns the NOTIFY channels of the schema skiplock_tasks lives
// in: work carries queue names (new work, resumed queues), control carries
// commands to workers (internal/control). Identifiers are cut at 63 bytes, as
// PostgreSQL cuts them.
func Channels(schema string) (work, control string) {
	return cut63("skiplock_" + schema), cut63("skiplock_ctl_" + schema)
}

func cut63(s string) string {
	if len(s) > 63 {
		return s[:63]
	}
	return s
}

// schemaCache resolves the client's schema once.
type schemaCache struct {
	mu     sync.Mutex
	schema string
}

func (c *Client) channels(ctx context.Context) (work, control string, err error) {
	c.schema.mu.Lock()
	defer c.schema.mu.Unlock()
	if c.schema.schema == "" {
		row, err := c.queries.SchemaTaskTable(ctx, c.exec)
		if errors.Is(err, pgerr.ErrNotFound) {
			return "", "", ErrNotMigrated
		}
		if err != nil {
			return "", "", err
		}
		c.schema.schema = row.Schema
	}
	work, control = Channels(c.schema.schema)
	return work, control, nil
}
