package worker

import (
	"context"
	"sync"
	"time"
)

// The in-flight window. A task holds its slot from its claim until its
// outcome is written, so a worker's throughput is at most Concurrency
// divided by how long a task is held, and that includes two round trips to
// the server: the claim's and the outcome write's. On loopback they are
// tens of microseconds; across a network, milliseconds, and 500 slots that
// carry tens of thousands of tasks a second on loopback carry a fraction
// of that at a 2 ms round trip (docs/PERFORMANCE.md, "Across a network").
//
// So with Concurrency left at zero, the worker sizes its window itself:
// localWindow on a local network, and DefaultConcurrency plus as much again
// for every windowRTTUnit of round trip once that is more, measured on a
// pool connection every windowEvery (the least of three pings: the path,
// not a passing stall), up to maxAutoConcurrency; and never more than its
// share of the server's lock table, half of it divided among the workers
// whose heartbeat is recent, since every task held is an advisory lock in
// that table (never below DefaultConcurrency: that much a worker always
// had). ClaimBatch, when left at zero too, follows: half the window, at
// most maxClaimBatch.
//
// Even on loopback the hold is claim plus outcome write, each a few
// milliseconds for hundreds of rows, and a larger window makes both
// statements larger, which costs the server less per task (a serial loop:
// a claim spends about 0.55 ms of server CPU per call whatever its size,
// an outcome write 0.3 ms). One worker on loopback worked 100,000 no-op
// tasks at 41,676 tasks/s with a window of 500, 47,466 with 1,000 and
// 50,466 with 2,000 (Xeon, two runs each, docs/PERFORMANCE.md). The window
// starts at localWindow and grows to settledWindow only from the pass
// windowSettle after the start: workers started at the same moment size
// their first windows before they see each other's heartbeats, and eight
// of them at 1,000 hold 8,000 task locks until their next measurement,
// within what a default server's lock table takes (about 12,300 advisory
// locks with max_connections 100 and max_locks_per_transaction 64) where
// eight at 2,000 would not be. A worker registers before its first claim,
// so by the settled pass the workers that claim have registered and share
// the table; one that registers later claims at localWindow until its own
// settled pass (eight processes, one of them settled alone at 2,000: at
// most 9,000 locks). A backlog that arrives at an idle worker is worked
// at the settled window for all but its first half second: 100,000 tasks
// at 28,807 and 30,485 tasks/s against 27,627 and 27,783 with a settle of
// 2 s (EPYC, alternating runs); eight processes started at once drained
// 50,000 tasks as fast as with 2 s (9,899 and 12,345 tasks/s against 9,899
// and 11,627).
const (
	// maxAutoConcurrency bounds the window of a worker whose Concurrency
	// is zero (sized by the round trip to the server).
	maxAutoConcurrency = 3200
	localWindow        = 1000
	settledWindow      = 2000
	windowSettle       = 500 * time.Millisecond
	windowRTTUnit      = 500 * time.Microsecond
	windowEvery        = 5 * time.Second
	windowPings        = 3
)

// autoWindow is the window for a round trip, the server's lock table
// (entries; 0 if unknown) and the number of live workers sharing it;
// settled once the worker has run windowSettle.
func autoWindow(rtt time.Duration, lockEntries int64, workers int, settled bool) int {
	base := localWindow
	if settled {
		base = settledWindow
	}
	n := max(base, DefaultConcurrency+int(int64(DefaultConcurrency)*int64(rtt)/int64(windowRTTUnit)))
	n = min(n, maxAutoConcurrency)
	if lockEntries > 0 {
		n = min(n, int(lockEntries/2/int64(max(workers, 1))))
	}
	return max(n, DefaultConcurrency)
}

// windowSizer resizes a worker's slots to its window, in a goroutine of its
// own (run), while the worker runs. The slots it holds back (slots.held)
// and still has to take back from running tasks (slots.owed) live in the
// slots, whose free keeps owed ones as tasks give them up.
//
// It also sets how many outcome writes may be in flight at once
// (complete.go): maxWrites once the round trip passes parallelWritesRTT,
// one below it. That part runs whatever Concurrency is.
type windowSizer struct {
	w         *Worker
	auto      bool // Concurrency was left at zero: the sizer sizes the window
	autoBatch bool // ClaimBatch follows the window

	mu      sync.Mutex
	current int // the window now
}

// parallelWritesRTT is the round trip past which outcome writes overlap.
const parallelWritesRTT = 500 * time.Microsecond

// newWindowSizer holds back the slots above DefaultConcurrency: the window
// starts where a fixed Concurrency would.
func newWindowSizer(w *Worker, auto, autoBatch bool) *windowSizer {
	z := &windowSizer{w: w, auto: auto, autoBatch: autoBatch, current: w.cfg.Concurrency}
	if auto {
		held := maxAutoConcurrency - DefaultConcurrency
		_ = w.slots.all.Acquire(context.Background(), int64(held)) // free: nothing runs yet
		w.slots.held.Store(int64(held))
	}
	return z
}

func (z *windowSizer) run(ctx context.Context) {
	settled := false
	pass := func(ctx context.Context) {
		rtt, n, ok := z.measure(ctx, settled)
		if !ok {
			return
		}
		writes := 1
		if rtt >= parallelWritesRTT {
			writes = min(maxWrites, int(z.w.pool.Config().MaxConns)-1)
		}
		z.w.comp.allowWrites(writes)
		if z.auto {
			z.resize(n)
			z.collect()
		}
	}
	pass(ctx) // at start: a backlog waiting across a network should not wait for the first tick
	select {
	case <-ctx.Done():
		return
	case <-time.After(windowSettle):
	}
	settled = true
	pass(ctx)
	every(ctx, windowEvery, pass)
}

// measure reads the round trip, the lock table and the live workers, and
// returns the round trip and the window they give.
func (z *windowSizer) measure(ctx context.Context, settled bool) (time.Duration, int, bool) {
	ctx, cancel := context.WithTimeout(ctx, windowEvery)
	defer cancel()
	conn, err := z.w.pool.Acquire(ctx)
	if err != nil {
		return 0, 0, false
	}
	defer conn.Release()
	var rtt time.Duration
	for i := range windowPings {
		start := time.Now()
		if err := conn.Ping(ctx); err != nil {
			return 0, 0, false
		}
		if d := time.Since(start); i == 0 || d < rtt {
			rtt = d
		}
	}
	entries, err := z.w.queries.SchemaLockTableSize(ctx, customPlans{conn})
	if err != nil {
		return 0, 0, false
	}
	live, err := z.w.queries.WorkerCountLive(ctx, customPlans{conn}, max(3*z.w.cfg.HealthInterval, 10*time.Second).Seconds())
	if err != nil {
		return 0, 0, false
	}
	if z.w.cfg.Mode == ModeLease {
		entries = 0 // leases hold no locks
	}
	return rtt, autoWindow(rtt, entries, int(live), settled), true
}

// resize moves the window to n: slots held back are given to the claim
// loops at once; a smaller window takes slots back as tasks give them up
// (slots.free) or are found free (collect).
func (z *windowSizer) resize(n int) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if n == z.current {
		return
	}
	s := z.w.slots
	want := int64(maxAutoConcurrency - n) // to hold back
	switch have := s.held.Load() + s.owed.Load(); {
	case want < have:
		give := have - want
		// Cancel what is owed first; owed only falls elsewhere.
		for {
			owed := s.owed.Load()
			k := min(give, owed)
			if s.owed.CompareAndSwap(owed, owed-k) {
				give -= k
				break
			}
		}
		if give > 0 {
			s.held.Add(-give)
			s.all.Release(give)
			s.signalFreed()
		}
	case want > have:
		s.owed.Add(want - have)
	}
	z.current = n
	if z.autoBatch {
		s.setBatch(min(max(n/2, 1), maxClaimBatch))
	}
	z.w.log.Debug("skiplock: in-flight window", "concurrency", n)
}

// collect takes back owed slots that are free now, without waiting: a
// waiting Acquire would queue every claim behind it.
func (z *windowSizer) collect() {
	s := z.w.slots
	for s.owed.Load() > 0 && s.all.TryAcquire(1) {
		if s.reclaim(1) == 0 {
			s.all.Release(1) // the owed count was taken meanwhile
			return
		}
	}
}

// window reports the window now, for tests and metrics.
func (z *windowSizer) window() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.current
}
