package worker

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// claimLoop claims tasks of one queue while there is capacity, until ctx
// ends. It sleeps when the queue is drained (or over its rate limit), until
// a notification, the poll interval, or ctx.
// qslots are the queue's own slots, nil when it has none.
func (w *Worker) claimLoop(ctx context.Context, queueName string, qslots *semaphore.Weighted) {
	poll := time.NewTicker(w.cfg.PollInterval)
	defer poll.Stop()
	// After a failed claim: the next as soon as the server can be reached
	// again (lease mode claims through the pool; in advisory mode a claim
	// waits for the lock session instead).
	retry := newRedial(&w.pool.Config().ConnConfig.Config)
	o := &outage{log: w.log, what: "claiming tasks from queue " + queueName}
	saturated := false // the last claim took all it asked for
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
		claimed, err := w.claimRound(queueName, n, qslots)
		w.slots.release(qslots, n-claimed)
		if err != nil {
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
		if saturated {
			continue // the queue may hold more
		}
		if !w.idle(ctx, queueName, poll.C) {
			return
		}
	}
}

// idle waits until the claim loop of queueName should claim again: a
// notification, the poll, or the head claim of a cursor in use falling due
// (a cursor claims from the head only now and then, and a row behind it, a
// higher priority say, must not wait for the poll however long that is).
// It reports false when ctx ends.
func (w *Worker) idle(ctx context.Context, queueName string, poll <-chan time.Time) bool {
	var headDue <-chan time.Time
	if d, ok := w.cursors.headDue(queueName, time.Now()); ok {
		t := time.NewTimer(d)
		defer t.Stop()
		headDue = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-w.queues.wakeChan(queueName):
	case <-poll:
	case <-headDue:
	}
	return true
}

// claimRound claims up to n tasks of a queue within its rate limits and
// starts them. Rate-limited names are claimed first, each within its own
// budget; the rest of the queue after them.
func (w *Worker) claimRound(queueName string, n int, qslots *semaphore.Weighted) (claimed int, err error) {
	budget := n
	if limit, ok := w.limits.byQueue[queueName]; ok {
		granted, window, err := w.takeBudget(limit, n)
		if err != nil {
			return 0, err
		}
		budget = granted
		defer func() { w.giveBack(limit, window, granted-claimed) }()
	}
	for _, limit := range w.limits.byName {
		if claimed >= budget {
			return claimed, nil
		}
		granted, window, err := w.takeBudget(limit, budget-claimed)
		if err != nil {
			return claimed, err
		}
		if granted == 0 {
			continue
		}
		got, err := w.claimAndStart(queueName, granted, []string{limit.Name}, nil, qslots)
		w.giveBack(limit, window, granted-got)
		claimed += got
		if err != nil {
			return claimed, err
		}
	}
	if claimed < budget {
		got, err := w.claimAndStart(queueName, budget-claimed, nil, w.limits.limitedNames, qslots)
		claimed += got
		if err != nil {
			return claimed, err
		}
	}
	return claimed, nil
}

func (w *Worker) claimAndStart(queueName string, max int, only, skip []string, qslots *semaphore.Weighted) (int, error) {
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
	limited := w.limitsSeen.any(w.queries, w.pool, false)
	rows, gen, err := w.guard.claim(p, limited)
	if err == nil && len(rows) == 0 && !limited {
		// The plain claim takes nothing once a limit exists: look again
		// now rather than idle until the next look.
		if w.limitsSeen.any(w.queries, w.pool, true) {
			rows, gen, err = w.guard.claim(p, true)
		}
	}
	if err != nil {
		return 0, err
	}
	cur.claimed(head, started, time.Since(started), rows)
	w.cfg.Observer.Claimed(queueName, max, len(rows))
	for _, r := range rows {
		w.launch(r, gen, qslots, limited)
	}
	return len(rows), nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// takeBudget takes up to want starts from a rate limit's current window.
func (w *Worker) takeBudget(limit RateLimit, want int) (int, time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	row, err := w.queries.RateLimitTake(ctx, w.pool, db.RateLimitTakeParams{
		Key: limit.key(), Want: int32(want), Lim: int32(limit.Limit), PeriodSeconds: limit.Per.Seconds(),
	})
	if err != nil {
		return 0, time.Time{}, err
	}
	return int(row.LastGranted), row.WindowStart, nil
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
