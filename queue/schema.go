package queue

import (
	"context"
	"errors"
	"sync"

	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/schema"
)

// SchemaInfo is the schema skiplock was migrated into, as Client.Schema
// reads it: what `skiplock migrate status` reports.
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

// Schema finds skiplock's tables through the search_path and reads the
// schema's version. It returns migrations.ErrNotMigrated when they are
// missing, as a *NoSchemaError when no schema of the search_path exists.
func (c *Client) Schema(ctx context.Context) (SchemaInfo, error) {
	info, err := schema.Read(ctx, c.pool)
	if err != nil {
		return SchemaInfo{}, err
	}
	return SchemaInfo{Name: info.Name, Version: info.Version, Dirty: info.Dirty}, nil
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
			return "", "", pgerr.ErrNotMigrated
		}
		if err != nil {
			return "", "", err
		}
		c.schema.schema = row.Schema
	}
	work, control = schema.Channels(c.schema.schema)
	return work, control, nil
}
