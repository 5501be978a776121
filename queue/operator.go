package queue

import (
	"context"

	"github.com/skiplock/skiplock/internal/clientaccess"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// The operator tools' reads (internal/ops: the dashboard, the skiplock
// command) reach a Client through internal/clientaccess, so that nothing
// only they need is exported.
func init() {
	clientaccess.Exec = func(c any) pgerr.Executor { return c.(*Client).exec }
	clientaccess.Count = func(ctx context.Context, c, f any) (int64, error) {
		return c.(*Client).count(ctx, f.(Filter))
	}
}
