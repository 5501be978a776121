package worker

import "golang.org/x/sync/semaphore"

// claimLimits bound a claim loop beyond the worker's free slots: queues
// with slots of their own (Config.QueueConcurrency) and rate limits
// (Config.RateLimits) by queue and by task name. claim.go obeys them.
// They are this process's configuration; the cluster-wide concurrency
// limits that operators set in the database (queue.Limit) are
// clusterlimits.go's.
type claimLimits struct {
	queueSlots   map[string]*semaphore.Weighted // queues with their own cap
	byQueue      map[string]RateLimit           // rate limits by queue
	byName       []RateLimit                    // rate limits by task name
	byKey        []RateLimit                    // per-key rate limits by task name (PerKey)
	limitedNames []string                       // the names of byName and byKey, which the rest of a claim skips
}

func newClaimLimits(cfg Config) claimLimits {
	l := claimLimits{queueSlots: map[string]*semaphore.Weighted{}, byQueue: map[string]RateLimit{}}
	for _, q := range cfg.Queues {
		if n, ok := cfg.QueueConcurrency[q]; ok {
			l.queueSlots[q] = semaphore.NewWeighted(int64(n))
		}
	}
	for _, r := range cfg.RateLimits {
		switch {
		case r.Queue != "":
			l.byQueue[r.Queue] = r
		case r.PerKey:
			l.byKey = append(l.byKey, r)
			l.limitedNames = append(l.limitedNames, r.Name)
		default:
			l.byName = append(l.byName, r)
			l.limitedNames = append(l.limitedNames, r.Name)
		}
	}
	return l
}
