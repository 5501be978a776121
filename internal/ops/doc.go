// Package ops holds the reads that only the operator tools make: the
// dashboard (queue/dashboard), the skiplock command and the metrics
// collector (worker/observe). Who holds which task lock, which workers are
// live, the rate limit windows, the tasks no worker handles, the counts
// behind the charts: a Go program that enqueues and works tasks has no use
// for them, so package queue does not export them, and these functions
// read them through a *queue.Client's pool instead.
//
// Their failures wrap queue's errors (queue.ErrInvalidRequest,
// migrations.ErrNotMigrated) as the client's own methods do.
package ops

import (
	"math"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/clientaccess"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/queue"
)

// queries is stateless: one value serves every call.
var queries = db.New()

// exec is c's pool, its errors interpreted.
func exec(c *queue.Client) pgerr.Executor { return clientaccess.Exec(c) }

func seconds(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
