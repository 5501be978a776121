package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
)

// leaseGuard guards each running task with a lease: the claim sets
// locked_until, the lease renewer pushes it forward, and the outcome write
// ends it with the status change. See guard.
type leaseGuard struct {
	guardDeps
}

// checkPooling: leases work behind a transaction pooler, but a cache of
// prepared statements does not.
func (g *leaseGuard) checkPooling(pooled bool) error {
	if pooled && cachesStatements(g.pool) {
		return ErrStatementCache
	}
	return nil
}

// open registers the worker. A failure is logged, not returned: the row is
// for operators and the heartbeat writes it again.
func (g *leaseGuard) open(ctx context.Context, _ int64, _ *outage) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := g.row.register(rctx, customPlans{g.pool}, 0); err != nil {
		g.log.Warn("skiplock: registering worker", "error", err)
	}
	return nil
}

func (g *leaseGuard) close() {}

func (g *leaseGuard) claim(p db.TaskClaimParams, how claimHow, _ startFunc) ([]db.TaskClaimRow, uint64, claimHow, error) {
	leaseMs := g.cfg.LeaseDuration.Milliseconds()
	ctx, cancel := context.WithTimeout(context.Background(), lockQueryTimeout)
	defer cancel()
	if how != howPlain { // a lease holds no block: every limited claim counts
		rows, err := claimLimited(ctx, g.queries, g.pool, p, leaseMs)
		return rows, 0, how, err
	}
	rows, err := claimPlain(ctx, g.queries, customPlans{g.pool}, p, leaseMs)
	return rows, 0, how, err
}

var alwaysUp = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (g *leaseGuard) up() <-chan struct{} { return alwaysUp }

func (g *leaseGuard) lost(uint64) bool { return false }

// reconcile: a claim that failed took nothing; its transaction rolled back.
func (g *leaseGuard) reconcile() error { return nil }

// release: a lease ends with the status change that the outcome wrote.
// release announces the places of gated tasks: a lease-mode limit counts
// running rows, so a place is free once the outcome is written.
func (g *leaseGuard) release(batch []finish) {
	for _, f := range batch {
		if f.gated {
			g.announce()
			return
		}
	}
}

// lead takes or renews the job's row in skiplock_leaders, which another
// worker may take once it expires.
func (g *leaseGuard) lead(ctx context.Context, l *leadership) bool {
	began := time.Now()
	n, err := g.queries.LeaderLeaseAcquire(ctx, g.pool, db.LeaderLeaseAcquireParams{
		Job: l.name, Holder: g.cfg.WorkerID, TtlMs: g.leaderTTL().Milliseconds(),
	})
	if err != nil || n != 1 {
		l.renewed = time.Time{}
		return false
	}
	// A renewal more than a TTL after the last one that held may follow
	// another worker's lease: a new term.
	if l.renewed.IsZero() || began.Sub(l.renewed) >= g.leaderTTL() {
		l.term++
	}
	l.renewed = began
	return true
}

// leaderTTL is how long a leader's row outlives its last renewal: a few
// rescue intervals, so a live leader never loses it.
func (g *leaseGuard) leaderTTL() time.Duration { return max(3*g.cfg.RescueInterval, 3*time.Second) }

// resign hands leaderships over at once rather than at expiry.
func (g *leaseGuard) resign(jobs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, job := range jobs {
		_ = g.queries.LeaderLeaseRelease(ctx, g.pool, db.LeaderLeaseReleaseParams{Job: job, Holder: g.cfg.WorkerID})
	}
}

func (g *leaseGuard) beforeRescue(context.Context) {}

// listenConfig: a transaction pooler cannot carry LISTEN; it needs a direct
// connection (ListenURL), or the worker polls.
func (g *leaseGuard) listenConfig() *pgx.ConnConfig {
	if g.cfg.ListenURL == "" {
		return nil
	}
	c, err := pgx.ParseConfig(g.cfg.ListenURL)
	if err != nil {
		g.log.Error("skiplock: ListenURL is not a connection string; polling instead", "error", err)
		return nil
	}
	return c
}

// jobs: the lease renewer, and the worker row's heartbeat through the pool
// (there is no lock session to carry it).
func (g *leaseGuard) jobs() []func(context.Context) {
	renewer := &leaseRenewer{
		queries: g.queries, pool: g.pool, workerID: g.cfg.WorkerID, lease: g.cfg.LeaseDuration,
		running: g.running, cancel: g.cancel, observer: g.cfg.Observer, log: g.log,
	}
	beat := &rowHeartbeat{row: g.row, pool: g.pool, every: heartbeatInterval, log: g.log}
	return []func(context.Context){renewer.run, beat.run}
}
