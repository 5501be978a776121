package queue

import (
	"context"
	"errors"
	"sync"

	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/schema"
)

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
