package worker

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/semaphore"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// claimLoop claims tasks of one queue while there is capacity, until ctx
// ends. It sleeps when the queue is drained (or over its rate limit), until
// a notification, the poll, or ctx.
// qslots are the queue's own slots, nil when it has none.
//
// The poll comes PollInterval after the loop's last claim, not on a fixed
// tick: a claim that comes back short has read every task of the queue
// that it could take, so a task that falls due is found within
// PollInterval either way, and a loop that claims often (tasks that hold
// a place, each handing it on in a claim of its own) makes no claim that
// only repeats the one before. On a tick, a busy loop made such a claim
// every second, and a carry that came next waited for it on the lock
// session (3 exclusive keys, 3 workers, 10 ms tasks).
func (w *Worker) claimLoop(ctx context.Context, queueName string, qslots *semaphore.Weighted) {
	poll := time.NewTimer(w.cfg.PollInterval)
	defer poll.Stop()
	// After a failed claim: the next as soon as the server can be reached
	// again (lease mode claims through the pool; in advisory mode a claim
	// waits for the lock session instead).
	retry := newRedial(&w.pool.Config().ConnConfig.Config)
	o := &outage{log: w.log, what: "claiming tasks from queue " + queueName}
	saturated := false // the last claim took all it asked for
	var size claimSize
	// The loop returns once every task it claimed has been launched.
	l := w.newLauncher()
	defer l.stop()
	for {
		n, err := w.slots.acquire(ctx, qslots, saturated)
		if err != nil {
			return
		}
		// Acquire succeeds on a done context when slots are free: a worker
		// shutting down must not claim.
		if ctx.Err() != nil {
			w.slots.release(qslots, n)
			return
		}
		if ask := size.ask(n); ask < n {
			w.slots.release(qslots, n-ask)
			n = ask
		}
		claimed, refill, err := w.claimRound(queueName, n, qslots, l)
		poll.Reset(w.cfg.PollInterval)
		w.slots.release(qslots, n-claimed)
		if err != nil {
			saturated, size = false, claimSize{}
			w.claimFailed(queueName, err, o)
			if errors.Is(err, errSessionDown) {
				select {
				case <-ctx.Done():
					return
				case <-w.guard.up():
				}
				continue
			}
			retry.failed(err)
			if !retry.sleep(ctx) {
				return
			}
			continue
		}
		retry.succeeded()
		o.ok()
		saturated = claimed == n
		size.claimed(n, claimed)
		if saturated {
			continue // the queue may hold more
		}
		if !w.idle(ctx, queueName, poll.C, refill) {
			return
		}
	}
}

// claimSize bounds a claim that follows one that came back short: the
// queue then held fewer claimable tasks than the loop had room for, and a
// claim reads the queue in claim order until it has taken as many as it
// asks or has read every pending task. Pending tasks that it may not take
// (an exclusive key's while another task of the key runs) are read each
// time: under 3 exclusive keys with 100 tasks each, a claim of 500 read
// all of them, and locked every pending task of the key it found free,
// to take one. Asked for twice what the last claim took (at least
// minShortClaim), it stops at the first few. While claims fill up, the
// bound doubles, and goes once it reaches what the loop has room for: a
// backlog that arrives at an idle worker is claimed in full within a few
// round trips.
type claimSize struct {
	bound int // 0: none
}

// minShortClaim is the least claimSize asks for.
const minShortClaim = 8

// ask is how many of the n places free the next claim asks for.
func (s *claimSize) ask(n int) int {
	if s.bound > 0 && s.bound < n {
		return s.bound
	}
	return n
}

// claimed records that a claim that asked for asked took got.
func (s *claimSize) claimed(asked, got int) {
	switch {
	case got < asked:
		s.bound = max(2*got, minShortClaim)
	case asked < s.bound:
		s.bound = 0 // the room the loop had bound it, and it filled up
	default:
		s.bound *= 2
	}
}

// idle waits until the claim loop of queueName should claim again: a
// notification, the poll, the head claim of a cursor in use falling due
// (a cursor claims from the head only now and then, and a row behind it, a
// higher priority say, must not wait for the poll however long that is),
// or, after refill when it is positive, the next window of a rate limit
// that held the last round back (its tasks are due then, whatever the
// poll). It reports false when ctx ends.
func (w *Worker) idle(ctx context.Context, queueName string, poll <-chan time.Time, refill time.Duration) bool {
	var headDue, refilled <-chan time.Time
	if d, ok := w.cursors.headDue(queueName, time.Now()); ok {
		t := time.NewTimer(d)
		defer t.Stop()
		headDue = t.C
	}
	if refill > 0 {
		t := time.NewTimer(refill)
		defer t.Stop()
		refilled = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-w.queues.wakeChan(queueName):
	case <-poll:
	case <-headDue:
	case <-refilled:
	}
	return true
}

// refillMargin is how long after a window's end, on the database clock as
// the worker reads it, the claim loop looks again: past the boundary, so
// that the claim meets the new window.
const refillMargin = 5 * time.Millisecond

// soonest keeps the earlier of two waits, zero meaning none.
func soonest(a, b time.Duration) time.Duration {
	if b <= 0 {
		return a
	}
	b = max(b, 0) + refillMargin
	if a <= 0 || b < a {
		return b
	}
	return a
}

// claimRound claims up to n tasks of a queue within its rate limits and
// starts them. Rate-limited names are claimed first, each within its own
// budget (per key for PerKey limits); the rest of the queue after them.
// refill is how long until the next window of a rate limit that held the
// round back, zero if none did.
func (w *Worker) claimRound(queueName string, n int, qslots *semaphore.Weighted, l *launcher) (claimed int, refill time.Duration, err error) {
	budget := n
	if limit, ok := w.limits.byQueue[queueName]; ok {
		granted, window, left, err := w.takeBudget(limit, n)
		if err != nil {
			return 0, 0, err
		}
		budget = granted
		if granted < n {
			refill = soonest(refill, left)
		}
		defer func() { w.giveBack(limit, window, granted-claimed) }()
	}
	for _, limit := range w.limits.byName {
		if claimed >= budget {
			return claimed, refill, nil
		}
		want := budget - claimed
		granted, window, left, err := w.takeBudget(limit, want)
		if err != nil {
			return claimed, refill, err
		}
		if granted < want {
			refill = soonest(refill, left)
		}
		if granted == 0 {
			continue
		}
		got, err := w.claimAndStart(queueName, granted, []string{limit.Name}, nil, qslots, l)
		w.giveBack(limit, window, granted-got)
		claimed += got
		if err != nil {
			return claimed, refill, err
		}
	}
	for _, limit := range w.limits.byKey {
		if claimed >= budget {
			return claimed, refill, nil
		}
		got, left, err := w.claimKeyed(queueName, limit, budget-claimed, qslots)
		claimed += got
		if err != nil {
			return claimed, refill, err
		}
		// Keys may be over their limit with tasks waiting: look again
		// when the window turns.
		refill = soonest(refill, left)
	}
	// Only the names this worker handles: rest is never empty when a name
	// is left (an empty filter would take every name).
	if claimed < budget && len(w.limits.rest) > 0 {
		got, err := w.claimAndStart(queueName, budget-claimed, w.limits.rest, nil, qslots, l)
		claimed += got
		if err != nil {
			return claimed, refill, err
		}
	}
	return claimed, refill, nil
}

func (w *Worker) claimAndStart(queueName string, max int, only, skip []string, qslots *semaphore.Weighted, l *launcher) (int, error) {
	p := db.TaskClaimParams{
		WorkerID:      w.cfg.WorkerID,
		Queue:         queueName,
		OnlyNames:     nonNil(only),
		SkipNames:     nonNil(skip),
		Max:           int32(max),
		ExclusiveSeed: w.classOID,
		LimitClass:    w.limitClass,
	}
	cur := w.cursors.get(queueName, only, skip)
	started := time.Now()
	head := cur.bound(&p, started)
	if before, due := cur.probeDue(started); due {
		// Counted with the claim loops, and ended with Run's context, so
		// that no probe outlives Run (stopClaiming waits for them).
		qs := w.queues
		qs.wg.Go(func() { w.probe(qs.ctx, queueName, only, skip, cur, before) })
	}
	advisory := w.cfg.Mode == ModeAdvisory
	how, checkFull := w.heldClaims.next(queueName, claimFor(w.limitsSeen.look(w.queries, w.pool, false), advisory), started)
	p.CheckFull = checkFull
	// A claim that carries outcomes starts its rows before its commit has
	// returned (earlyclaim.go); the rest are started once it has.
	launched := 0
	launch := func(rows []db.TaskClaimRow, gen uint64, ran claimHow, committed <-chan struct{}) {
		launched = len(rows)
		roomy := (ran == howQueue || ran == howHeld) && len(rows) == max
		l.start(launchBatch{rows: rows, gen: gen, qslots: qslots, limited: ran != howPlain, roomy: roomy, committed: committed})
	}
	rows, gen, how, err := w.guard.claim(p, how, launch)
	if err == nil && len(rows) == 0 && how != howLimited {
		// The plain claim takes nothing once a limit exists, the queue
		// claims once a name or key limit does, the held claim where no
		// held block has room: look again now, and claim with the
		// statement for what exists rather than idle until the next look.
		fresh := true
		if how == howHeld {
			// The limits are as last seen; the block was what lacked room.
			w.heldClaims.claimed(queueName, how, max, 0, time.Now())
			how, fresh = howPlain, false
		}
		if now := claimFor(w.limitsSeen.look(w.queries, w.pool, fresh), advisory); now != how && now != howPlain {
			how, p.CheckFull = now, true
			rows, gen, how, err = w.guard.claim(p, how, launch)
		}
	}
	if err != nil {
		// Tasks started before a commit that then failed are cancelled
		// with their lock session; their slots go back as they end.
		return launched, err
	}
	if launched == 0 {
		launch(rows, gen, how, nil)
	}
	if how != howPlain {
		w.heldClaims.claimed(queueName, how, max, len(rows), time.Now())
	}
	cur.claimed(head, started, time.Since(started), rows)
	if head && len(rows) == 0 && w.unhandled.has(queueName) && cur.carryDue() {
		qs := w.queues
		qs.wg.Go(func() { w.carry(qs.ctx, queueName, cur) })
	}
	w.cfg.Observer.Claimed(queueName, max, len(rows))
	return len(rows), nil
}

// probe looks for the first claimable row behind a cursor (cursor.go), on
// a pool connection, and wakes the queue's claim loop to start there if it
// finds one.
func (w *Worker) probe(ctx context.Context, queueName string, only, skip []string, cur *claimCursor, before claimPos) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	started := time.Now()
	rows, err := w.queries.TaskPendingBefore(ctx, customPlans{w.pool}, db.TaskPendingBeforeParams{
		Queue: queueName, OnlyNames: nonNil(only), SkipNames: nonNil(skip),
		BeforePriority: before.priority, BeforeRunAt: before.runAt, BeforeID: before.id,
	})
	var found *claimPos
	if err != nil {
		w.log.Debug("skiplock: looking for tasks behind the claim cursor", "queue", queueName, "error", err)
	} else if len(rows) > 0 {
		found = &claimPos{priority: rows[0].Priority, runAt: rows[0].RunAt, id: rows[0].ID}
	}
	if cur.probed(started, time.Since(started), found, err != nil) {
		w.wake(queueName)
	}
}

// carry moves a cursor whose claim from the head walked rows of names the
// worker does not handle, and took none, to the last due row of the queue
// (cursor.go).
func (w *Worker) carry(ctx context.Context, queueName string, cur *claimCursor) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r, err := w.queries.TaskPendingLast(ctx, w.pool, queueName)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			w.log.Debug("skiplock: looking for the last due task of a queue", "queue", queueName, "error", err)
		}
		cur.carried(nil)
		return
	}
	cur.carried(&claimPos{priority: r.Priority, runAt: r.RunAt, id: r.ID})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// takeBudget takes up to want starts from a rate limit's current window,
// and says how long that window has left.
func (w *Worker) takeBudget(limit RateLimit, want int) (int, time.Time, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	row, err := w.queries.RateLimitTake(ctx, w.pool, db.RateLimitTakeParams{
		Key: limit.key(), Want: int32(want), Lim: int32(limit.Limit), PeriodSeconds: limit.Per.Seconds(),
	})
	if err != nil {
		return 0, time.Time{}, 0, err
	}
	left := max(limit.Per-time.Duration(row.MsElapsed)*time.Millisecond, 0)
	return int(row.LastGranted), row.WindowStart, left, nil
}

// rateKeyScan is how many due tasks of a name a per-key claim of max looks
// at to find keys with budget left (keys without any are passed over).
func rateKeyScan(max int) int { return min(1000, 100+10*max) }

// claimKeyed claims up to max tasks of a name under a per-key rate limit
// and starts them: RateKeyTake grants tasks, at most what each key has
// left of its window, and TaskClaim takes those tasks by id (no cursor:
// the ids say where the tasks are); budget a key was granted and did not
// use (its task taken by another claimer meanwhile, say) is given back.
// left is how long the window has left.
func (w *Worker) claimKeyed(queueName string, limit RateLimit, max int, qslots *semaphore.Weighted) (claimed int, left time.Duration, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := w.queries.RateKeyTake(ctx, w.pool, db.RateKeyTakeParams{
		Scope: limit.key(), Queue: queueName, Name: limit.Name, Lim: int32(limit.Limit), PeriodSeconds: limit.Per.Seconds(),
		Want: int32(max), Scan: int32(rateKeyScan(max)),
	})
	if err != nil {
		return 0, 0, err
	}
	left = time.Duration(g.MsLeft) * time.Millisecond
	if len(g.Ids) == 0 {
		return 0, left, nil
	}
	granted := make(map[int64]string, len(g.Ids))
	for i, id := range g.Ids {
		granted[id] = g.Keys[i]
	}
	defer func() { w.giveBackKeys(limit, g.WindowStart, granted) }()
	limited := w.limitsSeen.look(w.queries, w.pool, false).Present
	rows, gen, _, err := w.guard.claim(db.TaskClaimParams{
		WorkerID:      w.cfg.WorkerID,
		Queue:         queueName,
		OnlyNames:     []string{limit.Name},
		SkipNames:     []string{},
		OnlyIds:       g.Ids,
		Max:           int32(len(g.Ids)),
		ExclusiveSeed: w.classOID,
		LimitClass:    w.limitClass,
		CheckFull:     true,
	}, howLimited, nil)
	if err != nil {
		return 0, left, err
	}
	w.cfg.Observer.Claimed(queueName, max, len(rows))
	for _, r := range rows {
		delete(granted, r.ID)
		w.launch(r, gen, qslots, limited, false, nil)
	}
	return len(rows), left, nil
}

// giveBackKeys returns the budget of granted tasks a per-key claim did not
// take, per key, while its window lasts.
func (w *Worker) giveBackKeys(limit RateLimit, window time.Time, unclaimed map[int64]string) {
	if len(unclaimed) == 0 {
		return
	}
	byKey := map[string]int32{}
	for _, k := range unclaimed {
		byKey[k]++
	}
	p := db.RateKeyGiveBackParams{Scope: limit.key(), CurrentWindow: window}
	for k, n := range byKey {
		p.Keys = append(p.Keys, k)
		p.Unused = append(p.Unused, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.queries.RateKeyGiveBack(ctx, w.pool, p); err != nil {
		w.log.Warn("skiplock: returning unused per-key rate-limit budget", "limit", limit.key(), "error", err)
	}
}

// giveBack returns budget a claim did not use, while its window lasts.
func (w *Worker) giveBack(limit RateLimit, window time.Time, unused int) {
	if unused <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := w.queries.RateLimitGiveBack(ctx, w.pool, db.RateLimitGiveBackParams{Key: limit.key(), Unused: int32(unused), CurrentWindow: window})
	if err != nil {
		w.log.Warn("skiplock: returning unused rate-limit budget", "limit", limit.key(), "error", err)
	}
}

func (w *Worker) claimFailed(queueName string, err error, o *outage) {
	switch {
	case errors.Is(err, errSessionDown):
		return // logged by the session
	case pgerr.IsLockTableFull(err):
		w.log.Warn("skiplock: PostgreSQL's lock table is full (out of shared memory); claims back off until running tasks finish. "+
			"Every running task holds one advisory lock; raise max_locks_per_transaction or lower Concurrency.", "queue", queueName)
	case pgerr.IsExclusiveKeyTaken(err):
		// Two claimers raced for one exclusive key; the index let one win.
		w.log.Debug("skiplock: exclusive key taken by a concurrent claim", "queue", queueName)
	default:
		// A database that went away fails every claim until it is back:
		// one line when it goes, one when it is back.
		o.failed(pgerr.Interpret(err), "queue", queueName)
	}
	if rerr := w.guard.reconcile(); rerr != nil {
		w.log.Warn("skiplock: reconciling advisory locks after a failed claim", "error", rerr)
	}
}

// launcher launches a claim loop's claimed tasks on a goroutine of its
// own, so that the loop's next claim goes out while they start. Launching
// a task (its execution, context and deadline, its place among the
// running, a handler goroutine woken) took 12-17% of the claim loop's
// time when the loop did it between claims, with the lock session idle
// meanwhile (docs/PERFORMANCE.md, "Launching off the claim loop").
type launcher struct {
	batches chan launchBatch
	done    chan struct{}
}

// launchBatch is one claim's rows and how they were claimed.
type launchBatch struct {
	rows           []db.TaskClaimRow
	gen            uint64
	qslots         *semaphore.Weighted
	limited, roomy bool
	// committed is closed once the claim's commit has returned, for rows
	// started before it (earlyclaim.go); nil when it had already.
	committed <-chan struct{}
}

func (w *Worker) newLauncher() *launcher {
	l := &launcher{batches: make(chan launchBatch, 2), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for b := range l.batches {
			for _, r := range b.rows {
				w.launch(r, b.gen, b.qslots, b.limited, b.roomy, b.committed)
			}
		}
	}()
	return l
}

// start hands a claim's rows to the launcher; it waits only while two
// claims' rows are still to launch.
func (l *launcher) start(b launchBatch) {
	if len(b.rows) > 0 {
		l.batches <- b
	}
}

// stop waits until every row handed over has been launched.
func (l *launcher) stop() {
	close(l.batches)
	<-l.done
}
