package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/skiplock/skiplock/db"
)

// leaseRenewer renews the leases of this worker's running tasks (lease
// mode) every third of the lease. A task whose lease could not be renewed
// is no longer this worker's: its handler is cancelled. When renewals fail
// for a whole lease (the database is unreachable), every handler is
// cancelled: their tasks may already run elsewhere.
type leaseRenewer struct {
	queries  *db.Queries
	pool     db.DBTX
	workerID string
	lease    time.Duration
	running  func() []*execution
	cancel   func(e *execution, cause error)
	observer Observer
	log      *slog.Logger
}

func (r *leaseRenewer) run(ctx context.Context) {
	tick := time.NewTicker(r.lease / 3)
	defer tick.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		running := r.running()
		if len(running) == 0 {
			lastOK = time.Now()
			continue
		}
		p := db.TaskLeaseRenewParams{WorkerID: r.workerID, LeaseMs: r.lease.Milliseconds()}
		for _, e := range running {
			p.Ids = append(p.Ids, e.task.ID)
			p.Attempts = append(p.Attempts, int32(e.task.Attempt))
			p.ClaimedUs = append(p.ClaimedUs, e.claimed.UnixMicro())
		}
		rctx, cancel := context.WithTimeout(ctx, r.lease/3)
		renewed, err := r.queries.TaskLeaseRenew(rctx, r.pool, p)
		cancel()
		if err != nil {
			if time.Since(lastOK) < r.lease {
				r.log.Warn("skiplock: renewing task leases failed; retrying", "error", err)
				continue
			}
			r.log.Error("skiplock: task leases expired without renewal; cancelling their handlers", "count", len(running), "error", err)
			renewed = nil
		} else {
			lastOK = time.Now()
		}
		ok := make(map[int64]bool, len(renewed))
		for _, id := range renewed {
			ok[id] = true
		}
		lost := 0
		for _, e := range running {
			if !ok[e.task.ID] && !e.settled.Load() {
				r.cancel(e, errLockLost)
				lost++
			}
		}
		if lost > 0 {
			r.observer.LockSessionLost(lost)
		}
	}
}
