package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// advisoryGuard guards each running task with a session-level advisory
// lock, all held on the worker's lock session (locksession.go). Locks die
// with their session, so a task claimed in one generation of the session
// is released only while that generation lasts. See guard.
type advisoryGuard struct {
	guardDeps
	ls       *lockSession // set by open
	classOID int64
	// handoffs and onCarried are the lock session's (handoff.go), set
	// before open.
	handoffs  *handoffs
	onCarried func(batch []finish, wrote []int64)

	// warnedNoSignal: said once that this role may not end a stale
	// worker's lock session.
	warnedNoSignal atomic.Bool
	// staleDown logs a database that went away once for the look for
	// stale sessions, not once per rescue pass. Made with the guard: the
	// look runs on the rescuer's goroutine and in every election's tries,
	// at the same time.
	staleDown *outage
}

// checkPooling: session locks cannot guard tasks behind a transaction
// pooler.
func (g *advisoryGuard) checkPooling(pooled bool) error {
	if pooled {
		return ErrTransactionPooling
	}
	return nil
}

// open opens the lock session, which registers the worker on itself.
func (g *advisoryGuard) open(ctx context.Context, classOID int64, o *outage) error {
	g.classOID = classOID
	// A warning only: read beside the session's connection (which takes
	// longer), not before it, and done before open returns.
	warned := make(chan struct{})
	defer func() { <-warned }()
	go func() {
		defer close(warned)
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if entries, err := g.queries.SchemaLockTableSize(ctx, customPlans{g.pool}); err == nil && int64(g.cfg.Concurrency) > entries/4 {
			g.log.Warn("skiplock: Concurrency is a large share of PostgreSQL's lock table, which every running task's advisory lock "+
				"and every session's locks share; past it, claims back off. Lower Concurrency, run fewer workers, or raise max_locks_per_transaction.",
				"concurrency", g.cfg.Concurrency, "lock_table_entries", entries)
		}
	}()
	g.ls = newLockSession(g.pool.Config().ConnConfig, int32(uint32(classOID)), classOID, g.cfg.sessionTuning(), g.log)
	g.ls.onLost = g.sessionLost
	g.ls.handoffs, g.ls.onCarried = g.handoffs, g.onCarried
	if g.handoffs != nil {
		ls := g.ls
		g.handoffs.busy = func() bool { return ls.busyOrSettling(time.Now()) }
	}
	g.ls.onUp = g.sessionUp
	g.ls.onFreed = g.freed
	g.ls.register = g.row.registerSession
	g.ls.turns = !g.cfg.ParallelClaims
	return untilAvailable(ctx, o, g.pool, func(ctx context.Context) error {
		if err := g.ls.connect(ctx); err != nil {
			return fmt.Errorf("skiplock: opening the lock session: %w", err)
		}
		return nil
	})
}

// freed announces places that the session's unlocks freed, and wakes this
// worker's claim loops if their tasks' ends did not (wake): the worker does
// not hear its own announcement (ownFreed).
func (g *advisoryGuard) freed(wake bool) {
	if wake {
		g.wakeAll()
	}
	g.announce()
}

// close ends the lock session, releasing every lock it holds.
func (g *advisoryGuard) close() { g.ls.close() }

// sessionUp runs once a lock session is registered.
func (g *advisoryGuard) sessionUp(gen uint64, _ uint32) {
	if gen > 1 {
		g.cfg.Observer.LockSessionReconnected()
		g.wakeAll()
	}
}

// sessionLost cancels the handlers whose locks died with the session:
// their tasks are now free for the rescuer and other workers.
func (g *advisoryGuard) sessionLost(gen uint64) {
	cancelled := 0
	for _, e := range g.running() {
		if e.gen == gen {
			g.cancel(e, errLockLost)
			cancelled++
		}
	}
	g.cfg.Observer.LockSessionLost(cancelled)
}

func (g *advisoryGuard) claim(p db.TaskClaimParams, how claimHow, start startFunc) ([]db.TaskClaimRow, uint64, claimHow, error) {
	return g.ls.claimStarting(p, how, start)
}

func (g *advisoryGuard) up() <-chan struct{} { return g.ls.ready() }

func (g *advisoryGuard) lost(gen uint64) bool { return gen <= g.ls.lostGen.Load() }

func (g *advisoryGuard) reconcile() error { return g.ls.reconcile() }

// release queues the batch's unlocks, by the generation that locked them,
// and has the session announce the places of gated tasks once the
// statement that carries the unlocks has run: a limit's place is free once
// its block's lock is released, which the session finds out (a block may
// hold more of this worker's tasks). An exclusive key is free once the
// outcome is written, which it is, but announced now it was slower to hand
// on: the other workers' claims then raced this worker's own, which takes
// the key's next task more often than not, for the claim turn (3 exclusive
// keys, 3 workers, 20 ms tasks: 0.829-0.839 of the ideal in three runs
// against 0.847-0.850 announced after the claim; timestamped at 10 ms, the
// claim that took the key's next task took 1.5-1.8 ms on average against
// 1.05-1.08 before these changes). The unlock of a task that held a place
// does not wait for a later claim to carry it (unlockFree).
func (g *advisoryGuard) release(batch []finish) {
	byGen := map[uint64][]int64{}
	limits := map[uint64][]int32{}
	keys := map[uint64][]string{}
	gatedPlace := false
	for _, f := range batch {
		byGen[f.gen] = append(byGen[f.gen], f.id)
		limits[f.gen] = append(limits[f.gen], f.limits...)
		if f.exclusiveKey != "" {
			keys[f.gen] = append(keys[f.gen], f.exclusiveKey)
		}
		gatedPlace = gatedPlace || f.gated && len(f.limits) > 0
	}
	for gen, ids := range byGen {
		g.ls.release(ids, limits[gen], keys[gen], gen, gatedPlace || len(keys) > 0)
	}
}

// lead holds the job's election lock in the lock session: it dies with the
// session, and another worker takes it on its next try.
func (g *advisoryGuard) lead(ctx context.Context, l *leadership) bool {
	gen, up := g.ls.generation()
	switch {
	case !up:
		l.gen = 0
	case l.gen != gen:
		acquired, got, err := g.ls.tryLeader(g.leaderKey(l.job))
		l.gen = 0
		if err == nil && acquired {
			l.gen = got
			l.term++
		}
		// The holder may be a zombie: a session cut off by a silent
		// network, alive on the server until TCP gives up. Any worker may
		// end it once its heartbeat is stale, and take over on its next
		// try.
		if err == nil && !acquired && g.cfg.StaleAfter > 0 && time.Since(l.checked) >= heartbeatEvery(g.cfg.StaleAfter) {
			l.checked = time.Now()
			g.endStaleSessions(ctx, g.leaderKey(l.job))
		}
	}
	return l.gen != 0
}

// leaderKey is the bigint advisory key of a maintenance job: the lock class
// in the high half keeps two skiplock schemas apart, and the bigint form
// (objsubid 1 in pg_locks) never collides with task locks (objsubid 2).
func (g *advisoryGuard) leaderKey(job uint32) int64 {
	return int64(uint64(uint32(g.classOID))<<32 | uint64(job))
}

// resign: election locks end with the lock session.
func (g *advisoryGuard) resign([]string) {}

// beforeRescue ends the lock sessions of workers cut off for StaleAfter,
// so that the rescue finds their tasks orphaned.
func (g *advisoryGuard) beforeRescue(ctx context.Context) {
	if g.cfg.StaleAfter > 0 {
		g.endStaleSessions(ctx, 0)
	}
}

// endStaleSessions ends the lock sessions of workers whose heartbeat is
// older than StaleAfter (only the holder of leaderKey's election, when not
// 0), so that the server releases their locks: a worker cut off by a
// silent network cannot keep its heartbeat fresh, but its session lives on
// in the server until TCP gives up. The rescuer's next pass finds their
// tasks orphaned.
func (g *advisoryGuard) endStaleSessions(ctx context.Context, leaderKey int64) {
	qctx, cancel := context.WithTimeout(ctx, max(g.cfg.RescueInterval, 5*time.Second))
	defer cancel()
	rows, err := g.queries.WorkerTerminateStale(qctx, g.pool, db.WorkerTerminateStaleParams{
		Self: g.cfg.WorkerID, StaleSeconds: g.cfg.StaleAfter.Seconds(), LeaderKey: leaderKey,
	})
	if err != nil {
		switch {
		case ctx.Err() != nil:
		case errors.Is(pgerr.Interpret(err), pgerr.ErrPermissionDenied):
			// The query leaves alone the sessions it finds it may not
			// end; this is a race with a change of grants.
			g.warnNoSignal(db.WorkerTerminateStaleRow{}, err)
		default:
			g.staleDown.failed(err)
		}
		return
	}
	g.staleDown.ok()
	for _, r := range rows {
		switch {
		case r.Terminated:
			what := "its task locks"
			if leaderKey != 0 {
				what = "its task locks and an election it held"
			}
			g.log.Warn("skiplock: ended the lock session of a worker whose heartbeat is stale (cut off?), releasing "+what,
				"lost_worker", r.ID, "backend_pid", r.Pid, "stale_after", g.cfg.StaleAfter)
		case !r.Permitted:
			g.warnNoSignal(r, nil)
		}
	}
}

// warnNoSignal says, once per worker, that this role may not end the lock
// session of a stale worker, and what fixes it.
func (g *advisoryGuard) warnNoSignal(r db.WorkerTerminateStaleRow, err error) {
	if !g.warnedNoSignal.CompareAndSwap(false, true) {
		return
	}
	const wait = "; until then its tasks wait for the server's TCP keepalives to end the session (TCPKeepalive* settings)."
	args := []any{"lost_worker", r.ID, "backend_pid", r.Pid, "session_role", r.SessionRole, "role", r.Role}
	if err != nil {
		args = append(args, "error", err)
	}
	if r.SessionSuperuser {
		g.log.Warn("skiplock: cannot end the lock session of a worker whose heartbeat is stale: it runs as superuser "+
			pgx.Identifier{r.SessionRole}.Sanitize()+", whose sessions only a superuser may end. Run workers as an "+
			"ordinary role (skiplock migrate grants --kind worker)"+wait, args...)
		return
	}
	role := "ROLE"
	if r.Role != "" {
		role = pgx.Identifier{r.Role}.Sanitize()
	}
	g.log.Warn("skiplock: cannot end the lock session of a worker whose heartbeat is stale: this role may not signal "+
		"another role's session. Run every worker as the same database role, or GRANT pg_signal_backend, "+
		"pg_read_all_stats TO "+role+wait, args...)
}

// listenConfig: the pool's own connection settings.
func (g *advisoryGuard) listenConfig() *pgx.ConnConfig { return g.pool.Config().ConnConfig.Copy() }

// jobs: the session's health check, which also carries the worker row's
// heartbeat.
func (g *advisoryGuard) jobs() []func(context.Context) {
	h := &sessionHealth{
		ls: g.ls, interval: g.cfg.HealthInterval, pingTimeout: g.cfg.PingTimeout, staleAfter: g.cfg.StaleAfter,
		beat: g.row.beatSession,
	}
	return []func(context.Context){h.run}
}
