// Package clientaccess hands the operator tools (internal/ops, and through
// it the dashboard and the skiplock command) what a queue.Client holds,
// without package queue exporting it. Package queue fills the variables in
// its init; this package cannot name queue's types (queue imports it), so
// the client and the filter travel as any, and internal/ops gives them
// their types back.
package clientaccess

import (
	"context"

	"github.com/skiplock/skiplock/internal/pgerr"
)

var (
	// Exec returns the executor of a *queue.Client: its pool, its errors
	// interpreted.
	Exec func(client any) pgerr.Executor
	// Count counts the tasks of a *queue.Client that a queue.ListFilter
	// selects.
	Count func(ctx context.Context, client, filter any) (int64, error)
)
