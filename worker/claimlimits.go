package worker

import (
	"slices"

	"golang.org/x/sync/semaphore"
)

// claimLimits bound a claim loop beyond the worker's free slots: queues
// with slots of their own (Config.QueueConcurrency) and rate limits
// (Config.RateLimits) by queue and by task name. claim.go obeys them.
// They are this process's configuration; the cluster-wide concurrency
// limits that operators set in the database (queue.Limit) are
// clusterlimits.go's.
type claimLimits struct {
	queueSlots map[string]*semaphore.Weighted // queues with their own cap
	byQueue    map[string]RateLimit           // rate limits by queue
	byName     []RateLimit                    // rate limits by task name
	byKey      []RateLimit                    // per-key rate limits by task name (PerKey)
	// rest are the names the worker has handlers for, less those of byName
	// and byKey:
	// what the rest of a claim takes. Every claim names the names it may
	// take, so that a task whose name this worker has no handler for stays
	// pending for a worker that has one. Sorted.
	rest []string
}

// newClaimLimits reads cfg's limits for a worker with handlers for the
// names handled (sorted). A rate limit on a name the worker does not
// handle has nothing to limit here, and is left out.
func newClaimLimits(cfg Config, handled []string) claimLimits {
	l := claimLimits{queueSlots: map[string]*semaphore.Weighted{}, byQueue: map[string]RateLimit{}}
	for _, q := range cfg.Queues {
		if n, ok := cfg.QueueConcurrency[q]; ok {
			l.queueSlots[q] = semaphore.NewWeighted(int64(n))
		}
	}
	limited := map[string]bool{}
	for _, r := range cfg.RateLimits {
		switch {
		case r.Queue != "":
			l.byQueue[r.Queue] = r
		case !slices.Contains(handled, r.Name):
		case r.PerKey:
			l.byKey = append(l.byKey, r)
			limited[r.Name] = true
		default:
			l.byName = append(l.byName, r)
			limited[r.Name] = true
		}
	}
	for _, n := range handled {
		if !limited[n] {
			l.rest = append(l.rest, n)
		}
	}
	return l
}
