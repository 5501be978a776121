package worker

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/semaphore"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// coalesceWait bounds how long a saturated claim loop waits for more free
// slots before claiming: handlers that finish together free their slots
// over a few hundred microseconds, and one claim of many tasks costs the
// lock session far less than many claims of a few.
const coalesceWait = time.Millisecond

// claimLoop claims tasks of one queue while there is capacity, until ctx
// ends. It sleeps when the queue is drained (or over its rate limit), until
// a notification, the poll interval, or ctx.
func (w *Worker) claimLoop(ctx context.Context, queueName string) {
	qslots := w.queueSlots[queueName]
	poll := time.NewTicker(w.cfg.PollInterval)
	defer poll.Stop()
	errBackoff := 50 * time.Millisecond
	saturated := false // the last claim took all it asked for
	for {
		n, err := w.acquireSlots(ctx, qslots, saturated)
		if err != nil {
			return
		}
		// Acquire succeeds on a done context when slots are free: a worker
		// shutting down must not claim.
		if ctx.Err() != nil {
			w.releaseSlots(qslots, n)
			return
		}
		claimed, err := w.claimRound(queueName, n, qslots)
		w.releaseSlots(qslots, n-claimed)
		if err != nil {
			w.claimFailed(queueName, err)
			if errors.Is(err, errSessionDown) {
				select {
				case <-ctx.Done():
					return
				case <-w.ls.ready():
				}
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(errBackoff):
			}
			errBackoff = min(errBackoff*2, 5*time.Second)
			continue
		}
		errBackoff = 50 * time.Millisecond
		saturated = claimed == n
		if saturated {
			continue // the queue may hold more
		}
		select {
		case <-ctx.Done():
			return
		case <-w.wakes[queueName]:
		case <-poll.C:
		}
	}
}

// acquireSlots waits for one free slot, of the queue's cap (if any) and of
// the process, then takes as many more as are free, up to ClaimBatch. When
// coalesce is set it waits up to coalesceWait for a full batch.
func (w *Worker) acquireSlots(ctx context.Context, qslots *semaphore.Weighted, coalesce bool) (int, error) {
	if qslots != nil {
		if err := qslots.Acquire(ctx, 1); err != nil {
			return 0, err
		}
	}
	if err := w.slots.Acquire(ctx, 1); err != nil {
		if qslots != nil {
			qslots.Release(1)
		}
		return 0, err
	}
	n := w.takeMoreSlots(qslots, 1)
	if coalesce && n < w.cfg.ClaimBatch {
		deadline := time.NewTimer(coalesceWait)
		defer deadline.Stop()
		for n < w.cfg.ClaimBatch {
			select {
			case <-w.slotFreed:
				n = w.takeMoreSlots(qslots, n)
			case <-deadline.C:
				return n, nil
			}
		}
	}
	return n, nil
}

// takeMoreSlots takes free slots without waiting, up to ClaimBatch.
func (w *Worker) takeMoreSlots(qslots *semaphore.Weighted, n int) int {
	for n < w.cfg.ClaimBatch {
		if qslots != nil && !qslots.TryAcquire(1) {
			break
		}
		if !w.slots.TryAcquire(1) {
			if qslots != nil {
				qslots.Release(1)
			}
			break
		}
		n++
	}
	return n
}

func (w *Worker) releaseSlots(qslots *semaphore.Weighted, n int) {
	if n <= 0 {
		return
	}
	w.slots.Release(int64(n))
	if qslots != nil {
		qslots.Release(int64(n))
	}
}

// claimRound claims up to n tasks of a queue within its rate limits and
// starts them. Rate-limited names are claimed first, each within its own
// budget; the rest of the queue after them.
func (w *Worker) claimRound(queueName string, n int, qslots *semaphore.Weighted) (claimed int, err error) {
	budget := n
	if limit, ok := w.queueLimits[queueName]; ok {
		granted, window, err := w.takeBudget(limit, n)
		if err != nil {
			return 0, err
		}
		budget = granted
		defer func() { w.giveBack(limit, window, granted-claimed) }()
	}
	for _, limit := range w.nameLimits {
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
		got, err := w.claimAndStart(queueName, budget-claimed, nil, w.limitedNames, qslots)
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
	}
	var rows []db.TaskClaimRow
	var gen uint64
	var err error
	if w.lease {
		p.LeaseMs = w.cfg.LeaseDuration.Milliseconds()
		ctx, cancel := context.WithTimeout(context.Background(), lockQueryTimeout)
		rows, err = w.queries.TaskClaim(ctx, customPlans{w.pool}, p)
		cancel()
	} else {
		rows, gen, err = w.ls.claim(p)
	}
	if err != nil {
		return 0, err
	}
	w.cfg.Observer.Claimed(queueName, max, len(rows))
	for _, r := range rows {
		w.launch(r, gen, qslots)
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

func (w *Worker) claimFailed(queueName string, err error) {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, errSessionDown):
		return // logged by the session
	case pgerr.IsLockTableFull(err):
		w.log.Warn("skiplock: PostgreSQL's lock table is full (out of shared memory); claims back off until running tasks finish. "+
			"Every running task holds one advisory lock; raise max_locks_per_transaction or lower Concurrency.", "queue", queueName)
	case errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "skiplock_tasks_exclusive_running_idx":
		// Two claimers raced for one exclusive key; the index let one win.
		w.log.Debug("skiplock: exclusive key taken by a concurrent claim", "queue", queueName)
	default:
		w.log.Error("skiplock: claiming tasks", "queue", queueName, "error", pgerr.Wrap(err))
	}
	if w.lease {
		return
	}
	if rerr := w.ls.reconcile(); rerr != nil {
		w.log.Warn("skiplock: reconciling advisory locks after a failed claim", "error", rerr)
	}
}
