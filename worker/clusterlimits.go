package worker

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
)

// Cluster-wide concurrency limits (queue.Limit, skiplock_limits: set in
// the database, shared by every worker; claimlimits.go has the per-process
// limits of Config) are enforced by the claim statement (sql/tasks.sql,
// TaskClaim) in both modes:
//
//   - Advisory mode: a limited task takes a place in one of a limit's
//     blocks (TaskClaim explains them): a block lock on the lock session,
//     held once for as long as any of the worker's tasks uses it
//     (lockSession.heldLimits counts them, finish.limits gives them back,
//     takeUnlocks releases a block with its last task). A worker that dies
//     frees its blocks with its session, at once, as it frees its task
//     locks. A claim with no limit row costs one look at the empty table.
//     While the only limits are queue limits, claims use TaskClaimQueue, a
//     fraction of TaskClaim's cost (one scope per row at most), on the
//     lock session's one generic plan (onePlan); under a queue limit far
//     above what runs it fills a held block with no lock tried but the
//     tasks' (heldClaims).
//   - Lease mode: nothing outlives a transaction, so a claim that may meet
//     a limit runs in a transaction that first takes a transaction lock per
//     limit (LimitLockForClaim), then counts the running tasks of each
//     scope in the claim statement's own, later, snapshot. Claims of
//     limited work serialize per limit, for the length of one claim.
//
// While no limit exists, which limitsProbe finds out at most once per
// limitsRecheck, both modes claim with TaskClaimPlain, which has none of
// the limit logic to plan or run. It takes nothing once a limit exists
// (in its own snapshot), so a limit set in between is never exceeded: an
// empty plain claim makes the worker look again at once (claimAndStart).

// claimHow names the claim statement a claim runs.
type claimHow int

const (
	// howPlain: TaskClaimPlain, while no limit exists (it takes nothing
	// once one does).
	howPlain claimHow = iota
	// howLimited: TaskClaim, every limit enforced (lease mode:
	// TaskClaimLease).
	howLimited
	// howQueue: TaskClaimQueue, in advisory mode while the only limits
	// are queue limits (it takes nothing once another exists).
	howQueue
	// howHeld: TaskClaimHeld, howQueue's claim within a block the lock
	// session holds with room, under a queue limit far above what runs
	// (it takes nothing where no held block has room).
	howHeld
)

// heldClaims remembers, per queue, whether the last limited claim took all
// it asked for. Such a claim met no full scope, and its queue's limits had
// room: the next one skips the look for full scopes (check_full), which
// counts the running rows of every scope on each claim (the count walks
// the running-task index, dead entries and all, which only vacuum
// removes: 8 µs a task of the server's 68 at 100,000 tasks), and, under a
// limit far above what runs, fills the block it holds with no lock tried
// but the tasks'. A claim that took fewer looks again.
type heldClaims struct {
	mu       sync.Mutex
	roomy    map[string]bool
	notUntil map[string]time.Time // a held claim took nothing: none before
	taken    [4]int64             // tasks taken by each statement, for tests
}

// next refines how, the statement for the limits that exist, for the next
// claim of a queue, and says whether it looks for full scopes: after a
// claim that took all it asked for, a queue claim tries the held block
// first, and none looks.
func (h *heldClaims) next(queue string, how claimHow, now time.Time) (claimHow, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	roomy := h.roomy[queue]
	if how == howQueue && roomy && !now.Before(h.notUntil[queue]) {
		return howHeld, false
	}
	return how, how == howPlain || !roomy
}

// claimed records how a limited claim of a queue went. A held claim that
// took nothing is not tried again for limitsRecheck.
func (h *heldClaims) claimed(queue string, how claimHow, asked, got int, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.roomy == nil {
		h.roomy, h.notUntil = map[string]bool{}, map[string]time.Time{}
	}
	h.roomy[queue] = got == asked || how == howHeld && got == 0
	if how == howHeld && got == 0 {
		h.notUntil[queue] = now.Add(limitsRecheck)
	}
	h.taken[how] += int64(got)
}

// limitsRecheck is how long a worker trusts that no limit exists, or that
// one does.
const limitsRecheck = time.Second

// limitsProbeTimeout bounds a look: it takes a connection from the pool,
// which the handlers may be using up, and the claim must not wait on it.
const limitsProbeTimeout = 250 * time.Millisecond

// limitsProbe remembers whether any limit exists, and whether any that
// is not a queue's does.
type limitsProbe struct {
	mu      sync.Mutex
	checked time.Time
	seen    db.LimitsExistRow
}

// look reports which limits exist, as last seen within limitsRecheck;
// fresh looks now. A look that fails (no pool connection free within
// limitsProbeTimeout, say) keeps the last answer, none at first, and the
// next call looks again: every claim is correct whatever exists (the
// cheaper ones take nothing where they do not apply), the answer only
// picks the cheapest.
func (l *limitsProbe) look(queries *db.Queries, pool *pgxpool.Pool, fresh bool) db.LimitsExistRow {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !fresh && !l.checked.IsZero() && time.Since(l.checked) < limitsRecheck {
		return l.seen
	}
	ctx, cancel := context.WithTimeout(context.Background(), limitsProbeTimeout)
	defer cancel()
	seen, err := queries.LimitsExist(ctx, customPlans{pool})
	if err != nil {
		return l.seen
	}
	l.seen, l.checked = seen, time.Now()
	return seen
}

// last is what the last look saw, without looking again.
func (l *limitsProbe) last() db.LimitsExistRow {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen
}

// claimFor picks the claim statement for the limits that exist.
func claimFor(seen db.LimitsExistRow, advisory bool) claimHow {
	switch {
	case !seen.Present:
		return howPlain
	case advisory && !seen.BeyondQueues:
		return howQueue
	default:
		return howLimited
	}
}

// claimPlain claims with TaskClaimPlain, whose parameters are TaskClaim's
// less those of limits, and whose rows are TaskClaim's; leaseMs > 0 claims
// under leases of that many milliseconds, instead of advisory locks.
func claimPlain(ctx context.Context, queries *db.Queries, tx db.DBTX, p db.TaskClaimParams, leaseMs int64) ([]db.TaskClaimRow, error) {
	return queries.TaskClaimPlainRows(ctx, tx, db.TaskClaimPlainParams{
		WorkerID: p.WorkerID, LeaseMs: leaseMs, LockClass: p.LockClass, UnlockIds: p.UnlockIds,
		LimitClass: p.LimitClass, UnlockLimitLocks: p.UnlockLimitLocks, Queue: p.Queue,
		UseAfter: p.UseAfter, AfterPriority: p.AfterPriority, AfterRunAt: p.AfterRunAt, AfterID: p.AfterID,
		OnlyNames: p.OnlyNames, SkipNames: p.SkipNames, Max: p.Max, ExclusiveSeed: p.ExclusiveSeed,
	})
}

// claimQueue claims with TaskClaimQueue, whose parameters are TaskClaim's
// less those of scopes, and whose rows are TaskClaim's.
func claimQueue(ctx context.Context, queries *db.Queries, tx db.DBTX, p db.TaskClaimParams) ([]db.TaskClaimRow, error) {
	held, err := queries.TaskClaimQueue(ctx, tx, db.TaskClaimQueueParams{
		WorkerID: p.WorkerID, LockClass: p.LockClass, UnlockIds: p.UnlockIds,
		LimitClass: p.LimitClass, UnlockLimitLocks: p.UnlockLimitLocks, Queue: p.Queue,
		CheckFull: p.CheckFull, HeldLimitLocks: p.HeldLimitLocks, HeldLimitCounts: p.HeldLimitCounts,
		UseAfter: p.UseAfter, AfterPriority: p.AfterPriority, AfterRunAt: p.AfterRunAt, AfterID: p.AfterID,
		OnlyNames: p.OnlyNames, SkipNames: p.SkipNames, Max: p.Max, ExclusiveSeed: p.ExclusiveSeed,
	})
	rows := make([]db.TaskClaimRow, len(held))
	for i, r := range held {
		rows[i] = db.TaskClaimRow(r)
	}
	return rows, err
}

// claimHeld claims with TaskClaimHeld, whose parameters are TaskClaim's
// less those of scopes, and whose rows are TaskClaim's.
func claimHeld(ctx context.Context, queries *db.Queries, tx db.DBTX, p db.TaskClaimParams) ([]db.TaskClaimRow, error) {
	return queries.TaskClaimHeldRows(ctx, tx, db.TaskClaimHeldParams{
		WorkerID: p.WorkerID, LockClass: p.LockClass, UnlockIds: p.UnlockIds,
		LimitClass: p.LimitClass, UnlockLimitLocks: p.UnlockLimitLocks, Queue: p.Queue,
		HeldLimitLocks: p.HeldLimitLocks, HeldLimitCounts: p.HeldLimitCounts,
		UseAfter: p.UseAfter, AfterPriority: p.AfterPriority, AfterRunAt: p.AfterRunAt, AfterID: p.AfterID,
		OnlyNames: p.OnlyNames, SkipNames: p.SkipNames, Max: p.Max, ExclusiveSeed: p.ExclusiveSeed,
	})
}

// claimLimited is a lease-mode claim (TaskClaimLease) under the
// transaction locks of the limits it may meet.
func claimLimited(ctx context.Context, queries *db.Queries, pool *pgxpool.Pool, p db.TaskClaimParams, leaseMs int64) (rows []db.TaskClaimRow, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := queries.LimitLockForClaim(ctx, tx, db.LimitLockForClaimParams{
			LimitClass: int64(uint32(p.LimitClass)), Queue: p.Queue,
		}); err != nil {
			return err
		}
		leased, err := queries.TaskClaimLease(ctx, customPlans{tx}, db.TaskClaimLeaseParams{
			WorkerID: p.WorkerID, LeaseMs: leaseMs, Queue: p.Queue, CheckFull: p.CheckFull,
			UseAfter: p.UseAfter, AfterPriority: p.AfterPriority, AfterRunAt: p.AfterRunAt, AfterID: p.AfterID,
			OnlyNames: p.OnlyNames, SkipNames: p.SkipNames, OnlyIds: p.OnlyIds, Max: p.Max,
			ExclusiveSeed: p.ExclusiveSeed, LimitsLocked: true,
		})
		rows = make([]db.TaskClaimRow, len(leased))
		for i, r := range leased {
			rows[i] = db.TaskClaimRow(r)
		}
		return err
	})
	return rows, err
}
