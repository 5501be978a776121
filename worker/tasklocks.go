package worker

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// The task locks on the lock session (locksession.go): claims take them,
// released ones are batched onto the next claim, and reconcile drops any
// that a failed claim left behind.

// unlockDelay is how long released task locks may wait for the next claim
// to carry them before they are sent on their own. It only delays a retry's
// re-claim of the same task, never a claim of other work.
const unlockDelay = 2 * time.Millisecond

// While claims follow each other (the last ended within unlockRide), the
// next one carries the unlocks, which wait for it up to unlockMaxWait:
// sent on their own between two claims, they hold the next claim back by
// a statement and its round trip (across a 2.7 ms round trip, one
// standalone unlock per claim took a fifth of the lock session's time).
// Places of gated tasks never wait so: another worker may be waiting.
const (
	unlockRide    = 50 * time.Millisecond
	unlockMaxWait = 100 * time.Millisecond
)

// claim takes tasks as p says, with the statement how names, and locks
// each one. It carries the pending unlocks with it. A held claim whose
// unlocks release the last block the session holds runs as a queue claim
// (ran): with no block, it could only take nothing, and the worker would
// stop trying held claims for a while though nothing is full. Places it
// freed are announced, unless it took every one of them again (retook).
func (s *lockSession) claim(p db.TaskClaimParams, how claimHow) (rows []db.TaskClaimRow, gen uint64, ran claimHow, err error) {
	return s.claimStarting(p, how, nil)
}

// startFunc starts the tasks of a claim that carries outcomes before its
// commit has returned (earlyclaim.go); committed is closed once it has.
type startFunc func(rows []db.TaskClaimRow, gen uint64, ran claimHow, committed <-chan struct{})

// claimStarting is claim, and hands the rows of a claim that carries
// outcomes to start, when start is not nil, as soon as they arrive, before
// the claim's commit returns (earlyclaim.go). Should that commit fail, the
// rows handed to start are returned with its error, and the session is
// closed: its tasks are cancelled as a lost session's are.
func (s *lockSession) claimStarting(p db.TaskClaimParams, how claimHow, start startFunc) (rows []db.TaskClaimRow, gen uint64, ran claimHow, err error) {
	p.LockClass = s.class
	freed, wake := false, false
	var keys []string
	var carry *handoffWrite
	defer func() {
		if err == nil && freed && !retook(p.UnlockLimitLocks, keys, rows) {
			// Outcomes it carried woke no claim loop of this worker.
			s.announceFreed(wake || carry != nil)
		}
	}()
	defer func() { s.lastClaim.Store(time.Now().UnixNano()) }()
	defer func() {
		if carry != nil {
			s.carried(carry, gen, err)
		}
	}()
	err = s.do(func(ctx context.Context, conn *pgx.Conn, g uint64) error {
		gen = g
		s.limitClass = p.LimitClass
		if how != howLimited {
			carry = s.takeHandoffs(g, p.WorkerID)
		}
		p.UnlockIds, p.UnlockLimitLocks, keys, freed, wake = s.takeUnlocks(g)
		ran = how
		if how == howHeld && len(s.heldLimits) == 0 {
			ran = howQueue
		}
		// The plan a carry's claim runs on, early when its rows may start
		// before its commit.
		var plan *onePlan
		early := carry != nil && start != nil
		switch ran {
		case howLimited, howQueue, howHeld:
			p.HeldLimitLocks = make([]int32, 0, len(s.heldLimits))
			p.HeldLimitCounts = make([]int32, 0, len(s.heldLimits))
			for k, n := range s.heldLimits {
				p.HeldLimitLocks = append(p.HeldLimitLocks, k)
				p.HeldLimitCounts = append(p.HeldLimitCounts, int32(n))
			}
			switch ran {
			case howQueue:
				if plan, err = s.newPlan(ctx, conn, carry, early); err == nil {
					rows, err = claimQueue(ctx, s.queries, plan, p)
				}
			case howHeld:
				if plan, err = s.newPlan(ctx, conn, carry, early); err == nil {
					rows, err = claimHeld(ctx, s.queries, plan, p)
				}
			default:
				rows, err = s.queries.TaskClaim(ctx, customPlans{conn}, p)
			}
		default:
			rows, plan, err = s.claimPlain(ctx, conn, p, carry, early)
		}
		if plan != nil && plan.pending != nil {
			if err != nil {
				plan.abort()
				return err
			}
			if len(rows) > 0 {
				start(rows, g, ran, plan.pending.committed)
			}
			if err = plan.finish(); err != nil {
				if len(rows) > 0 {
					// The tasks started hold locks whose claim did not
					// commit: the session goes, and they with it (do).
					closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
					conn.Close(closeCtx)
					cancel()
				}
				return err
			}
		}
		if err != nil {
			return err
		}
		for _, r := range rows {
			s.held[r.ID]++
			for _, k := range r.LimitLocks {
				s.heldLimits[k]++
			}
		}
		return nil
	})
	return rows, gen, ran, err
}

// claimTurnWait bounds the wait for a queue's claim turn (ClaimTurn). Eight
// processes each claiming about 250 rows in 4 ms wait about 30 ms; a turn
// not free within this is not waited for.
//
// A claim that carries the outcome of a task that held a place waits at
// most carryTurnWait: it hands on a place someone waits for, and the turn
// may be held by another worker's poll that reads every pending task of
// keys all taken (10,000 tasks waiting per key: tens of milliseconds, the
// carries waiting behind it up to a hundred).
const (
	claimTurnWait = 200 * time.Millisecond
	carryTurnWait = 5 * time.Millisecond
)

// claimPlain runs the plain claim on the session's one plan (onePlan),
// within its queue's claim turn unless the worker claims in parallel. A
// turn that is not free within claimTurnWait is skipped: the claim runs at
// once without it, carrying the same unlocks (the failed batch ran none of
// its statements past the turn).
func (s *lockSession) claimPlain(ctx context.Context, conn *pgx.Conn, p db.TaskClaimParams, carry *handoffWrite, early bool) ([]db.TaskClaimRow, *onePlan, error) {
	turn, wait := s.turns, claimTurnWait
	if carry != nil {
		wait = carryTurnWait
	}
	for {
		plan, err := s.newPlan(ctx, conn, carry, early)
		if err != nil {
			return nil, nil, err
		}
		if turn {
			if err := s.queries.ClaimTurn(ctx, plan, db.ClaimTurnParams{
				WaitMs: wait.Milliseconds(), LockClassOid: s.classOID, Queue: p.Queue,
			}); err != nil {
				return nil, nil, err
			}
		}
		rows, err := claimPlain(ctx, s.queries, plan, p, 0)
		if turn && pgerr.IsLockTimeout(err) && !conn.IsClosed() {
			turn = false
			continue
		}
		return rows, plan, err
	}
}

// newPlan is a onePlan on conn for a claim, with the outcome write the
// claim carries, if any, queued before it (handoff.go); early has its rows
// come before its commit (earlyclaim.go).
func (s *lockSession) newPlan(ctx context.Context, conn *pgx.Conn, carry *handoffWrite, early bool) (*onePlan, error) {
	if carry == nil {
		plan, err := newOnePlan(ctx, s.queries, conn)
		if err != nil {
			return nil, err
		}
		plan.prepared = s.early
		return plan, nil
	}
	plan := &onePlan{conn: conn, early: early, prepared: s.early}
	if err := carry.queue(ctx, s.queries, plan, s.outcomeCommit); err != nil {
		return nil, err
	}
	if err := s.queries.ClaimPlanSettings(ctx, plan); err != nil {
		return nil, err
	}
	return plan, nil
}

// takeHandoffs takes the outcomes handed over for the next claim (mu
// held), for a claim of generation g to carry: their limit slots and
// exclusive keys go with the unlocks it carries, so that the claim may
// take them again, and is announced as free if it does not. Outcomes of
// an earlier generation go to the completer: their locks died with their
// session.
func (s *lockSession) takeHandoffs(g uint64, workerID string) *handoffWrite {
	if s.handoffs == nil {
		return nil
	}
	batch := s.handoffs.take()
	s.umu.Lock()
	defer s.umu.Unlock()
	mine := batch[:0:0]
	var other []finish
	for _, f := range batch {
		if f.gen == g && s.unlocksGen == g {
			mine = append(mine, f)
		} else {
			other = append(other, f)
		}
	}
	if len(other) > 0 {
		s.handoffs.fallback(other)
	}
	if len(mine) == 0 {
		return nil
	}
	for _, f := range mine {
		s.unlockLims = append(s.unlockLims, f.limits...)
		if f.exclusiveKey != "" {
			s.unlockKeys = append(s.unlockKeys, f.exclusiveKey)
		}
	}
	s.unlockFree = true
	return newHandoffWrite(mine, workerID)
}

// carried ends a claim that carried outcomes. Committed, their tasks'
// locks are released by a later statement, and the worker accounts for
// them (onCarried). Failed, the claim's transaction wrote none of them:
// the completer writes them, less the limit slots that the claim took over
// (released, or left for reconcile), and the tasks' unlocks follow its
// write as usual.
func (s *lockSession) carried(carry *handoffWrite, gen uint64, err error) {
	if err != nil {
		for i := range carry.batch {
			carry.batch[i].limits = nil
		}
		s.handoffs.fallback(carry.batch)
		return
	}
	ids := make([]int64, len(carry.batch))
	for i, f := range carry.batch {
		ids[i] = f.id
	}
	s.release(ids, nil, nil, gen, false)
	if s.onCarried != nil {
		s.onCarried(carry.batch, carry.wrote)
	}
}

// release queues the locks of tasks claimed in generation gen, whose
// outcomes are written, for release; gated asks for an announcement once
// they are released (as does a limit block whose last task this was);
// keys are the exclusive keys the outcomes freed. Locks of an earlier generation died with their
// session and are dropped: releasing them by key could release a lock the
// new session took for a new claim of the same task (the places they held
// are free already, and announced as such).
func (s *lockSession) release(ids []int64, limits []int32, keys []string, gen uint64, gated bool) {
	s.umu.Lock()
	defer s.umu.Unlock()
	if gen != s.unlocksGen {
		if gated || len(limits) > 0 {
			go s.announceFreed(false) // the loops woke when the session came back
		}
		return
	}
	if len(s.unlocks) == 0 && len(s.unlockLims) == 0 {
		s.unlocksAt = time.Now()
	}
	s.unlocks = append(s.unlocks, ids...)
	s.unlockLims = append(s.unlockLims, limits...)
	s.unlockKeys = append(s.unlockKeys, keys...)
	s.unlockFree = s.unlockFree || gated
	if s.flushTimer == nil {
		s.flushTimer = time.AfterFunc(unlockDelay, s.flushUnlocks)
	}
}

// takeUnlocks hands the pending unlocks of generation g to a statement
// about to run on the session (mu held), and forgets them as held: should
// the statement fail, reconcile releases whatever is still held. freed
// reports that some were gated, or that a limit block goes: the caller
// announces it once its statement has run, unless the statement was a
// claim that took every freed place again (retook), for which keys are
// the exclusive keys freed. wake reports that a block goes with no gated
// task among the unlocks (its tasks' ends woke no claim loop): the
// worker's own loops are to be woken too.
func (s *lockSession) takeUnlocks(g uint64) (ids []int64, limits []int32, keys []string, freed, wake bool) {
	s.umu.Lock()
	ids, limits, keys, freed = s.unlocks, s.unlockLims, s.unlockKeys, s.unlockFree
	s.unlocks, s.unlockLims, s.unlockKeys, s.unlockFree = nil, nil, nil, false
	if s.flushTimer != nil {
		s.flushTimer.Stop()
		s.flushTimer = nil
	}
	s.umu.Unlock()
	if s.unlocksGen != g || (ids == nil && limits == nil) {
		return []int64{}, []int32{}, keys, freed, false
	}
	for _, id := range ids {
		if s.held[id] <= 1 {
			delete(s.held, id)
		} else {
			s.held[id]--
		}
	}
	// A limit block is held once, by however many tasks use it: released
	// with the last of them.
	var unlock []int32
	for _, k := range limits {
		if s.heldLimits[k] <= 1 {
			delete(s.heldLimits, k)
			unlock = append(unlock, k)
		} else {
			s.heldLimits[k]--
		}
	}
	return nonNilIDs(ids), nonNilKeys(unlock), keys, freed || len(unlock) > 0, !freed && len(unlock) > 0
}

// retook reports whether a claim that released the limit blocks unlocked,
// and carried the unlocks of tasks whose outcomes freed exclusive keys,
// took each block and each key again for its rows: the places are then
// taken, and announcing them would wake every other worker's claim loops
// to claim for nothing. Under a limit of 3 worked by 3 workers (10 ms
// tasks, 2 shared CPUs), the next task to take a freed place ran on the
// worker that freed it in 281 hand-offs of 297, and each announcement cost
// the other two workers a claim each that took nothing; under 3 exclusive
// keys, each such claim also read every pending task of the queue. With
// neither (a place freed within a block the session still holds, which no
// one else can use), it reports false: the caller announces as it would
// have.
func retook(unlocked []int32, keys []string, rows []db.TaskClaimRow) bool {
	if len(unlocked) == 0 && len(keys) == 0 {
		return false
	}
	taken := map[int32]bool{}
	takenKeys := map[string]bool{}
	for _, r := range rows {
		for _, k := range r.LimitLocks {
			taken[k] = true
		}
		if r.ExclusiveKey != "" {
			takenKeys[r.ExclusiveKey] = true
		}
	}
	for _, k := range unlocked {
		if !taken[k] {
			return false
		}
	}
	for _, k := range keys {
		if !takenKeys[k] {
			return false
		}
	}
	return true
}

// announceFreed announces, if the worker asked for it, that places held by
// gated tasks are free; wake: to this worker's claim loops too.
func (s *lockSession) announceFreed(wake bool) {
	if s.onFreed != nil {
		s.onFreed(wake)
	}
}

func nonNilIDs(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

func nonNilKeys(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

// flushUnlocks sends pending unlocks that no claim carried. While a
// statement runs on the session (under load, a claim, which took the
// unlocks pending when it started), and while claims follow each other
// (unlockRide), it waits another unlockDelay instead: the claim that
// follows carries them. Sent behind the running claim
// instead, they were 2.2-2.6 statements per 1,000 tasks, 0.85-0.9 ms each,
// a tenth of the lock session's time (docs/PERFORMANCE.md, "The lock
// session's time").
func (s *lockSession) flushUnlocks() {
	s.umu.Lock()
	ride := !s.unlockFree && time.Since(s.unlocksAt) < unlockMaxWait &&
		time.Since(time.Unix(0, s.lastClaim.Load())) < unlockRide
	s.umu.Unlock()
	if s.busySince.Load() != 0 || ride {
		s.umu.Lock()
		if s.flushTimer != nil {
			s.flushTimer.Reset(unlockDelay)
		}
		s.umu.Unlock()
		return
	}
	freed, wake := false, false
	err := s.do(func(ctx context.Context, conn *pgx.Conn, g uint64) error {
		var ids []int64
		var limits []int32
		ids, limits, _, freed, wake = s.takeUnlocks(g)
		if len(ids) == 0 && len(limits) == 0 {
			return nil
		}
		_, err := s.queries.TaskUnlockMany(ctx, conn, db.TaskUnlockManyParams{
			LockClass: s.class, Ids: ids, LimitClass: s.limitClass, LimitLocks: limits,
		})
		if err != nil && !conn.IsClosed() {
			// The locks may still be held; reconcile finds out.
			return errors.Join(err, s.reconcileLocked(ctx, conn))
		}
		return err
	})
	if err != nil && !errors.Is(err, errSessionDown) {
		s.log.Warn("skiplock: releasing task locks", "error", err)
	}
	if freed {
		// Released, or gone with a lost session: free either way.
		s.announceFreed(wake)
	}
}

// reconcile releases task locks the session holds but no claim accounts
// for. A claim statement that fails part way (out of shared memory, a
// cancelled query) has already taken some advisory locks: session locks are
// not transactional, so they outlive the rollback.
func (s *lockSession) reconcile() error {
	return s.do(func(ctx context.Context, conn *pgx.Conn, _ uint64) error {
		return s.reconcileLocked(ctx, conn)
	})
}

// reconcileLocked is reconcile with mu held.
func (s *lockSession) reconcileLocked(ctx context.Context, conn *pgx.Conn) error {
	{
		for range 3 { // a lock taken twice needs two unlocks
			keys, err := s.queries.TaskLocksHeld(ctx, conn, s.classOID)
			if err != nil {
				return err
			}
			expected := make(map[int64]bool, len(s.held))
			for id := range s.held {
				expected[id%(1<<32)] = true
			}
			var extra []int64
			for _, k := range keys {
				if !expected[k] {
					extra = append(extra, k)
				}
			}
			extraLimits, err := s.unaccountedLimitLocks(ctx, conn)
			if err != nil {
				return err
			}
			if len(extra) == 0 && len(extraLimits) == 0 {
				return nil
			}
			s.log.Warn("skiplock: releasing advisory locks left by a failed claim", "count", len(extra)+len(extraLimits))
			// The key is the low 32 bits of a task id, and so is a valid
			// id for TaskUnlockMany.
			if _, err := s.queries.TaskUnlockMany(ctx, conn, db.TaskUnlockManyParams{
				LockClass: s.class, Ids: nonNilIDs(extra), LimitClass: s.limitClass, LimitLocks: extraLimits,
			}); err != nil {
				return err
			}
		}
		return nil
	}
}

// unaccountedLimitLocks lists the limit slot locks the session holds that
// no claim accounts for (mu held).
func (s *lockSession) unaccountedLimitLocks(ctx context.Context, conn *pgx.Conn) ([]int32, error) {
	extra := []int32{}
	if s.limitClass == 0 {
		return extra, nil
	}
	keys, err := s.queries.LimitLocksHeld(ctx, conn, int64(uint32(s.limitClass)))
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if key := int32(uint32(k)); s.heldLimits[key] == 0 {
			extra = append(extra, key)
		}
	}
	return extra, nil
}
