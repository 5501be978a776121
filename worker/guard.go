package worker

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
)

// guard keeps a claimed task this worker's while its handler runs, so that
// no other worker runs it, and lets go of it once its outcome is written.
// New chooses one of two, from Config.Mode, and nothing else in the worker
// asks which:
//
//   - advisoryGuard (ModeAdvisory): a session-level advisory lock per task,
//     all held on the worker's one lock session. A task whose lock is gone
//     (the session ended) is orphaned.
//   - leaseGuard (ModeLease): a lease per task (locked_until), renewed by
//     the lease renewer. A task whose lease expired is orphaned. No state
//     lives in a session, so it works behind a transaction pooler.
//
// Either way the outcome write is fenced by the claim (TaskFinishMany
// writes only a running task of this worker and attempt), and the rescuer
// finds both kinds of orphans in one query.
type guard interface {
	// checkPooling returns the error Run gives at start for a pool whose
	// sessions are, or are not, shared per transaction; nil to go on.
	checkPooling(pooled bool) error
	// open prepares the guard in the schema whose task table has OID
	// classOID, and registers the worker; it waits out outages (logging
	// through o) and fails only on a configuration error or when ctx ends.
	open(ctx context.Context, classOID int64, o *outage) error
	// close lets go of every task still guarded, at the end of Run.
	close()

	// claim claims tasks as p says and guards each one, with the
	// statement how names (claimHow), or with ran where that could not
	// apply (a held claim whose block went with the unlocks it carried).
	// gen names what guards them (the lock session's generation; 0 for
	// leases), for release. A claim that carries outcomes may hand its
	// rows to start before its commit returns (earlyclaim.go), and then
	// returns them with its error, if any; start is nil to have every
	// claim return its rows only.
	claim(p db.TaskClaimParams, how claimHow, start startFunc) (rows []db.TaskClaimRow, gen uint64, ran claimHow, err error)
	// lost reports whether what guards the tasks of generation gen is
	// gone (its lock session lost; leases: never here, the renewer says).
	lost(gen uint64) bool
	// up returns a channel that is closed while claims can be made: a
	// claim that failed with errSessionDown waits for it.
	up() <-chan struct{}
	// reconcile tidies up after a claim that failed part way.
	reconcile() error
	// release lets go of the tasks of a batch whose outcomes are written
	// (or could not be: the rescuer then takes them), and announces the
	// places of gated ones once they are free.
	release(batch []finish)

	// lead keeps or tries to take the leadership l of a maintenance job
	// and reports whether this worker holds it.
	lead(ctx context.Context, l *leadership) bool
	// resign hands the named leaderships over at shutdown.
	resign(jobs []string)
	// beforeRescue runs before each pass of the elected rescuer.
	beforeRescue(ctx context.Context)

	// listenConfig is the connection to LISTEN on; nil for none (the
	// worker polls).
	listenConfig() *pgx.ConnConfig
	// jobs are the background loops that keep the guards alive and
	// cancel the handlers of tasks whose guard is lost; Run runs each in
	// a goroutine of its own until shutdown is complete.
	jobs() []func(ctx context.Context)
}

// guardDeps is what a guard needs from the worker it serves.
type guardDeps struct {
	pool    *pgxpool.Pool
	queries *db.Queries
	cfg     Config
	log     *slog.Logger
	row     workerRow
	// running lists the executions in flight; cancel cancels one with a
	// cause; wakeAll wakes every claim loop.
	running func() []*execution
	cancel  func(e *execution, cause error)
	wakeAll func()
	// announce tells every worker's claim loops, through the work
	// channel, that a place a task may be waiting for (a concurrency
	// limit's slot, an exclusive key) is free; called once it is.
	announce func()
}

// newGuard returns the guard of cfg.Mode.
func newGuard(d guardDeps) guard {
	if d.cfg.Mode == ModeLease {
		return &leaseGuard{guardDeps: d}
	}
	return &advisoryGuard{guardDeps: d,
		staleDown: &outage{log: d.log, what: "looking for lock sessions of workers whose heartbeat is stale"}}
}
