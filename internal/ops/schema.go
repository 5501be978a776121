package ops

import (
	"context"

	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/queue"
)

// SchemaInfo is the schema skiplock was migrated into, as Schema reads it:
// what `skiplock migrate status` reports.
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
}

// Schema finds skiplock's tables through the search_path of c's pool and
// reads the schema's version. It returns migrations.ErrNotMigrated when
// they are missing, as a *queue.NoSchemaError when no schema of the
// search_path exists.
func Schema(ctx context.Context, c *queue.Client) (SchemaInfo, error) {
	info, err := schema.Read(ctx, exec(c))
	if err != nil {
		return SchemaInfo{}, err
	}
	return SchemaInfo{Name: info.Name, Version: info.Version, Dirty: info.Dirty}, nil
}
