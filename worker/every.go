package worker

import (
	"context"
	"time"
)

// every runs pass every d until ctx ends: the loop of a background job
// whose work is one pass at a time (a pass that outlasts d delays the
// next; none is run twice at once).
func every(ctx context.Context, d time.Duration, pass func(ctx context.Context)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pass(ctx)
	}
}
