package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/skiplock/skiplock/db"
)

// Retirement: how often finished tasks past their retention are deleted,
// how many per statement, and how often and after how long the rows of
// stopped workers go.
const (
	retireInterval  = time.Minute
	retireBatch     = 10000
	pruneInterval   = 10 * time.Second
	workerRetention = 7 * 24 * time.Hour
)

// retirer deletes finished tasks past their retention (RetainCompleted,
// RetainFailed, RetainCancelled), workflows with no task left, audit
// records past RetainAudit, the rows of per-key rate limits whose window
// has ended, and the rows of workers stopped for
// workerRetention. It works only while leads says
// this worker leads (the rescuer's election), so that one worker does it.
type retirer struct {
	leads   func() bool
	queries *db.Queries
	pool    db.DBTX
	retain  map[string]time.Duration // by status; < 0 keeps forever
	audit   time.Duration            // the audit trail's; < 0 keeps it forever
	log     *slog.Logger
}

func newRetirer(cfg Config, leads func() bool, queries *db.Queries, pool db.DBTX, log *slog.Logger) *retirer {
	return &retirer{leads: leads, queries: queries, pool: pool, log: log, audit: cfg.RetainAudit, retain: map[string]time.Duration{
		"completed": cfg.RetainCompleted, "failed": cfg.RetainFailed, "cancelled": cfg.RetainCancelled,
	}}
}

func (r *retirer) run(ctx context.Context) {
	retire := time.NewTicker(r.every())
	defer retire.Stop()
	prune := time.NewTicker(pruneInterval)
	defer prune.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-retire.C:
			if r.leads() {
				r.retire(ctx)
			}
		case <-prune.C:
			if r.leads() {
				if _, err := r.queries.WorkerPrune(ctx, r.pool, workerRetention.Seconds()); err != nil && ctx.Err() == nil {
					r.log.Warn("skiplock: pruning old worker rows", "error", err)
				}
			}
		}
	}
}

// every is retireInterval, or less when a retention is shorter.
func (r *retirer) every() time.Duration {
	d := retireInterval
	for _, keep := range r.retain {
		if keep > 0 {
			d = min(d, max(keep/2, 100*time.Millisecond))
		}
	}
	if r.audit > 0 {
		d = min(d, max(r.audit/2, 100*time.Millisecond))
	}
	return d
}

// retire deletes finished tasks past their retention, a batch at a time,
// so that no statement holds many row locks or runs long.
func (r *retirer) retire(ctx context.Context) {
	for status, keep := range r.retain {
		if keep < 0 {
			continue
		}
		var total int64
		for ctx.Err() == nil {
			n, err := r.queries.TaskRetire(ctx, r.pool, db.TaskRetireParams{Status: status, OlderThanSeconds: keep.Seconds(), BatchSize: retireBatch})
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("skiplock: deleting finished tasks past their retention", "status", status, "error", err)
				}
				return
			}
			total += n
			if n < retireBatch {
				break
			}
		}
		if total > 0 {
			r.log.Debug("skiplock: deleted finished tasks past their retention", "status", status, "count", total)
		}
	}
	r.retireWorkflows(ctx)
	r.retireBatches(ctx)
	r.retireAudit(ctx)
	if _, err := r.queries.RateKeyRetire(ctx, r.pool); err != nil && ctx.Err() == nil {
		r.log.Warn("skiplock: deleting the rows of ended per-key rate-limit windows", "error", err)
	}
}

// retireAudit deletes the audit records older than RetainAudit, a batch at
// a time.
func (r *retirer) retireAudit(ctx context.Context) {
	if r.audit < 0 {
		return
	}
	var total int64
	for ctx.Err() == nil {
		n, err := r.queries.AuditPurge(ctx, r.pool, db.AuditPurgeParams{OlderThanSeconds: r.audit.Seconds(), BatchSize: retireBatch})
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("skiplock: deleting audit records past their retention", "error", err)
			}
			return
		}
		total += n
		if n < retireBatch {
			break
		}
	}
	if total > 0 {
		r.log.Debug("skiplock: deleted audit records past their retention", "count", total)
	}
}

// workflowGrace is how old an empty workflow must be before it is deleted.
const workflowGrace = time.Minute

// retireWorkflows deletes the rows of workflows whose tasks are all gone.
func (r *retirer) retireWorkflows(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := r.queries.WorkflowRetire(ctx, r.pool, db.WorkflowRetireParams{OlderThanSeconds: workflowGrace.Seconds(), BatchSize: retireBatch})
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("skiplock: deleting workflows without tasks", "error", err)
			}
			return
		}
		if n < retireBatch {
			return
		}
	}
}

// retireBatches deletes the rows of batches whose tasks are all gone. Their
// counts go with them.
func (r *retirer) retireBatches(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := r.queries.BatchRetire(ctx, r.pool, db.BatchRetireParams{OlderThanSeconds: workflowGrace.Seconds(), BatchSize: retireBatch})
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("skiplock: deleting batches without tasks", "error", err)
			}
			return
		}
		if n < retireBatch {
			return
		}
	}
}
