package worker

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
)

// The heartbeat, in this package, is only ever the worker row's
// heartbeat_at in skiplock_workers: proof that the worker (in advisory
// mode: its lock session) is alive, which operators read and the rescuer
// uses to end the sessions of cut-off workers (StaleAfter). Keeping a
// task's lease is renewal (renew.go); checking the lock session is health
// (health.go).

// heartbeatInterval is the heartbeat's period when StaleAfter is off, and
// always in lease mode.
const heartbeatInterval = 10 * time.Second

// heartbeatEvery is how often the lock session writes the heartbeat: five
// chances before staleAfter.
func heartbeatEvery(staleAfter time.Duration) time.Duration {
	if staleAfter <= 0 {
		return heartbeatInterval
	}
	return max(staleAfter/5, time.Millisecond)
}

// workerRow writes this worker's row in skiplock_workers.
type workerRow struct {
	queries *db.Queries
	id      string
	host    string
	pid     int32
	queues  []string
	names   *[]string // the names of the worker's handlers, set by Run before the row is written
	// registered is set once this process has registered: later
	// registrations (a new lock session) keep the row's started_at, which
	// tells this process from another that had its worker id.
	registered *atomic.Bool
}

// register records the worker, and its lock session's backend pid (0 for
// none).
func (r workerRow) register(ctx context.Context, conn db.DBTX, lockBackendPID int32) error {
	err := r.queries.WorkerRegister(ctx, conn, db.WorkerRegisterParams{
		ID: r.id, Host: r.host, Pid: r.pid, Queues: r.queues, LockBackendPid: lockBackendPID, Names: r.handledNames(),
		NewProcess: r.registered == nil || !r.registered.Load(),
	})
	if err == nil && r.registered != nil {
		r.registered.Store(true)
	}
	return err
}

// handledNames are the names the row records: nil, NULL in the table, for
// none known.
func (r workerRow) handledNames() []string {
	if r.names == nil {
		return nil
	}
	return *r.names
}

// registerSession registers the worker on its lock session itself: its
// heartbeat_at is then a moment when that pid was this session, which
// WorkerTerminateStale relies on. backendPID 0 means ask the session.
func (r workerRow) registerSession(ctx context.Context, conn *pgx.Conn, backendPID int32) error {
	if backendPID == 0 {
		var err error
		if backendPID, err = r.queries.SessionBackendPID(ctx, customPlans{conn}); err != nil {
			return err
		}
	}
	return r.register(ctx, customPlans{conn}, backendPID)
}

// beatSession writes the heartbeat through the lock session.
func (r workerRow) beatSession(ctx context.Context, conn *pgx.Conn) error {
	n, err := r.queries.WorkerSessionHeartbeat(ctx, conn, r.id)
	if err == nil && n == 0 {
		// The row is gone (pruned by hand?): write it again.
		err = r.registerSession(ctx, conn, 0)
	}
	return err
}

// rowHeartbeat writes the heartbeat through the pool every period, for a
// worker without a lock session (lease mode).
type rowHeartbeat struct {
	row   workerRow
	pool  db.DBTX
	every time.Duration
	log   *slog.Logger
}

func (h *rowHeartbeat) run(ctx context.Context) {
	every(ctx, h.every, func(ctx context.Context) {
		if err := h.beat(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("skiplock: worker heartbeat", "error", err)
		}
	})
}

// beat writes the heartbeat once.
func (h *rowHeartbeat) beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.every)
	defer cancel()
	return h.row.queries.WorkerHeartbeat(ctx, h.pool, h.row.id)
}
