package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// pinned: a producer offers SustainedRate tasks/s (the rates it reached are
// reported: a busy machine may not reach it) to one worker with
// default settings. After a clean phase, another session opens a
// transaction, takes an xid (BEGIN; SELECT txid_current()) and sits idle in
// it for Pin, holding the xmin horizon back as a stuck application or a
// long report does: nothing claimed or finished in that time can be
// vacuumed or pruned away. Then it commits, and the run goes on for a
// recovery phase. The workload compares throughput and claim latency while
// pinned with the clean phase (targets: at least 70% of the clean rate,
// claim p99 at most 100 ms).
//
// The worker runs in this process, so that each claim statement can be
// timed (a pgx tracer) and each task's wait measured (its handler's start
// minus its created_at, on the same machine's clock).
func (b *bencher) pinned(ctx context.Context) error {
	o := b.opts
	name := fmt.Sprintf("rate=%s/s pin=%s", formatNumber(o.SustainedRate), o.Pin)
	params := map[string]float64{"rate": o.SustainedRate, "pin_s": o.Pin.Seconds()}
	return b.repeat(ctx, WorkloadPinned, name, params, func(ctx context.Context, run int) ([]measure, error) {
		return b.pinnedRun(ctx, WorkloadPinned+" "+name+runLabel(run, o.Runs))
	})
}

// pinPhases: the clean phase before the pin and the recovery after it.
func pinPhases(pin time.Duration) (clean, after time.Duration) {
	clean = min(max(pin/4, 2*time.Second), time.Minute)
	return clean, min(max(pin/8, 2*time.Second), 30*time.Second)
}

// claimTimer is a pgx tracer that keeps the duration of every claim (TaskClaim, TaskClaimPlain)
// statement, or batch ending in one, with the time it ended.
type claimTimer struct {
	batchTracing
	mu     sync.Mutex
	claims []timedClaim
}

type timedClaim struct {
	end int64 // Unix nanoseconds
	d   time.Duration
}

func (c *claimTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if n := queryName(data.SQL); n != "TaskClaim" && n != "TaskClaimPlain" {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, traceStart{name: "TaskClaim", start: time.Now()})
}

func (c *claimTimer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if s, ok := ctx.Value(traceKey{}).(traceStart); ok {
		c.record(s.start)
	}
}

// TraceBatchEnd keeps a batch whose last statement is a claim (the lock
// session's claim, sent after its plan's settings).
func (c *claimTimer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if b, ok := ctx.Value(batchKey{}).(*batchTrace); ok && (b.name == "TaskClaim" || b.name == "TaskClaimPlain") {
		c.record(b.start)
	}
}

func (c *claimTimer) record(start time.Time) {
	now := time.Now()
	c.mu.Lock()
	c.claims = append(c.claims, timedClaim{end: now.UnixNano(), d: now.Sub(start)})
	c.mu.Unlock()
}

// between returns the durations of the claims that ended in [from, to).
func (c *claimTimer) between(from, to time.Time) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	f, t := from.UnixNano(), to.UnixNano()
	for _, cl := range c.claims {
		if cl.end >= f && cl.end < t {
			out = append(out, cl.d)
		}
	}
	return out
}

// pinnedStarts records when each task's handler started and how long it
// had waited.
//
// A 15-minute run records about 5 million starts, from the handlers, under
// one mutex. Their slices are sized for the whole run up front and hold no
// pointers: grown by append, each growth copied up to 100 MB while every
// handler waited on the mutex, and the garbage collector scanned the
// time.Time values' pointers; the run's worst windows fell on those
// growths (about 600 and 760 s into a 15-minute pin at 5,000 tasks/s).
type pinnedStarts struct {
	mu    sync.Mutex
	at    []int64 // Unix nanoseconds
	waits []time.Duration
}

// newPinnedStarts makes room for n starts.
func newPinnedStarts(n int) *pinnedStarts {
	return &pinnedStarts{at: make([]int64, 0, n), waits: make([]time.Duration, 0, n)}
}

func (p *pinnedStarts) add(t time.Time, wait time.Duration) {
	p.mu.Lock()
	p.at = append(p.at, t.UnixNano())
	p.waits = append(p.waits, wait)
	p.mu.Unlock()
}

// count returns the number of starts in [from, to).
func (p *pinnedStarts) count(from, to time.Time) int {
	n, _ := p.between(from, to)
	return n
}

// pinnedCommits records the producer's commits: when, and how many tasks.
type pinnedCommits struct {
	mu sync.Mutex
	at []int64 // Unix nanoseconds
	n  []int
}

func (p *pinnedCommits) add(t time.Time, n int) {
	p.mu.Lock()
	p.at = append(p.at, t.UnixNano())
	p.n = append(p.n, n)
	p.mu.Unlock()
}

// count returns the number of tasks committed in [from, to).
func (p *pinnedCommits) count(from, to time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, t, n := from.UnixNano(), to.UnixNano(), 0
	for i, at := range p.at {
		if at >= f && at < t {
			n += p.n[i]
		}
	}
	return n
}

// between returns the number of starts in [from, to) and their waits.
func (p *pinnedStarts) between(from, to time.Time) (int, []time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var waits []time.Duration
	f, t := from.UnixNano(), to.UnixNano()
	for i, at := range p.at {
		if at >= f && at < t {
			waits = append(waits, p.waits[i])
		}
	}
	return len(waits), waits
}

func (b *bencher) pinnedRun(ctx context.Context, label string) ([]measure, error) {
	o := b.opts
	clean, after := pinPhases(o.Pin)
	s, producerPool, err := b.env.newRunSchema(ctx, 2)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	client := queue.New(producerPool)

	cfg, err := s.poolConfig()
	if err != nil {
		return nil, err
	}
	// Room for every start and claim of the run, so that no slice grows
	// while it runs (pinnedStarts); 200 claims a second is more than a
	// worker makes at these rates.
	runFor := (clean + o.Pin + after + 2*time.Minute).Seconds()
	timer := &claimTimer{claims: make([]timedClaim, 0, int(200*runFor))}
	cfg.ConnConfig.Tracer = timer
	wpool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer wpool.Close()
	var done atomic.Int64
	starts := newPinnedStarts(int(1.2 * o.SustainedRate * runFor))
	w := worker.New(wpool, worker.Config{Logger: slog.New(slog.NewTextHandler(b.progressOut(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	runErr := make(chan error, 1)
	go func() {
		runErr <- w.Run(runCtx, worker.Handlers{noopTask: func(_ context.Context, t *worker.Task) error {
			now := time.Now()
			starts.add(now, now.Sub(t.CreatedAt))
			done.Add(1)
			return nil
		}})
	}()

	// The producer: rate/100 tasks every 10 ms, on schedule. Each commit
	// is kept with its time, so that a slow window can be told apart from
	// a producer that fell behind.
	var enqueued atomic.Int64
	enqueues := &pinnedCommits{}
	prodCtx, stopProd := context.WithCancel(ctx)
	defer stopProd()
	prodErr := make(chan error, 1)
	start := time.Now()
	go func() {
		per := max(int(o.SustainedRate/100), 1)
		tasks := make([]queue.NewTask, per)
		var failed error
		every(prodCtx, 10*time.Millisecond, func() bool {
			for i := range tasks {
				tasks[i] = queue.NewTask{Name: noopTask, Payload: benchPayload{N: int(enqueued.Load()) + i}}
			}
			if _, err := client.EnqueueMany(prodCtx, tasks); err != nil {
				if prodCtx.Err() == nil {
					failed = err
				}
				return false
			}
			enqueued.Add(int64(per))
			enqueues.add(time.Now(), per)
			return true
		})
		prodErr <- failed
	}()

	var maxBacklog atomic.Int64
	stopProgress := b.prog.track(func() string {
		backlog := enqueued.Load() - done.Load()
		if backlog > maxBacklog.Load() {
			maxBacklog.Store(backlog)
		}
		return fmt.Sprintf("%s: %s s, backlog %s", label, formatNumber(time.Since(start).Seconds()), formatNumber(float64(backlog)))
	})
	defer stopProgress()

	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-prodErr:
			return fmt.Errorf("producer: %w", err)
		case err := <-runErr:
			return fmt.Errorf("worker stopped: %v", err)
		case <-time.After(d):
			return nil
		}
	}
	if err := wait(clean); err != nil {
		return nil, err
	}
	pinStart := time.Now()
	enqAtPin := enqueued.Load()
	pin, err := pgx.Connect(ctx, b.env.url)
	if err != nil {
		return nil, err
	}
	defer pin.Close(context.Background())
	var xid int64
	if _, err := pin.Exec(ctx, "BEGIN"); err != nil {
		return nil, err
	}
	if err := pin.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
		return nil, err
	}
	if err := wait(o.Pin); err != nil {
		return nil, err
	}
	var dead int64
	if err := s.pool.QueryRow(ctx, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'skiplock_tasks'::regclass").Scan(&dead); err != nil {
		return nil, err
	}
	if _, err := pin.Exec(ctx, "COMMIT"); err != nil {
		return nil, err
	}
	pinEnd := time.Now()
	enqAtCommit := enqueued.Load()
	if err := wait(after); err != nil {
		return nil, err
	}
	stopProd()
	if err := <-prodErr; err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	// Drain what was enqueued, then stop the worker.
	want := enqueued.Load()
	deadline := time.Now().Add(2 * time.Minute)
	for done.Load() < want {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d tasks ran within 2 minutes of the end", done.Load(), want)
		}
		if err := wait(10 * time.Millisecond); err != nil {
			return nil, err
		}
	}
	stopRun()
	if err := <-runErr; err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	stopProgress()

	rateOf := func(from, to time.Time) float64 {
		n, _ := starts.between(from, to)
		return float64(n) / to.Sub(from).Seconds()
	}
	// The clean phase's rate skips its first second (start-up).
	cleanFrom := start.Add(time.Second)
	cleanRate := rateOf(cleanFrom, pinStart)
	pinnedRate := rateOf(pinStart, pinEnd)
	worst := pinnedRate
	var worstRateFrom time.Time
	const window = 10 * time.Second
	for t := pinStart; !t.Add(window).After(pinEnd); t = t.Add(window) {
		if r := rateOf(t, t.Add(window)); r < worst {
			worst, worstRateFrom = r, t
		}
	}
	if !worstRateFrom.IsZero() {
		// Whether the worker fell behind or the producer did: the tasks
		// enqueued in the window, and what was waiting at its start and end.
		end := worstRateFrom.Add(window)
		offered := enqueues.count(worstRateFrom, end)
		backlogAt := func(t time.Time) int { return enqueues.count(start, t) - starts.count(start, t) }
		fmt.Fprintf(b.progressOut(), "pinned: the worst 10 s for throughput, %.3f of clean, began %.0f s into the pin, at %s: %d tasks started, %d enqueued, backlog %d at its start and %d at its end\n",
			worst/cleanRate, worstRateFrom.Sub(pinStart).Seconds(), worstRateFrom.UTC().Format(time.RFC3339),
			starts.count(worstRateFrom, end), offered, backlogAt(worstRateFrom), backlogAt(end))
	}
	p99 := func(ds []time.Duration) float64 {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ms(ds[min(len(ds)-1, len(ds)*99/100)])
	}
	_, cleanWaits := starts.between(cleanFrom, pinStart)
	_, pinnedWaits := starts.between(pinStart, pinEnd)
	// The wait's p99 in each 10-second window of the pin: the worst, the
	// first and the last (a trend shows as last over first).
	// Where the worst window was, and how many passed 50 ms: one slow
	// window is a stall to find in the server's log at that time, many a
	// trend.
	var worstWait, firstWait, lastWait float64
	var worstFrom time.Time
	slowWindows := 0
	var slowAt []string // each slow window: when it began, into the pin, and its p99
	for t := pinStart; !t.Add(window).After(pinEnd); t = t.Add(window) {
		_, ws := starts.between(t, t.Add(window))
		w := p99(ws)
		if t.Equal(pinStart) {
			firstWait = w
		}
		lastWait = w
		if w > worstWait {
			worstWait, worstFrom = w, t
		}
		if w > 50 {
			slowWindows++
			slowAt = append(slowAt, fmt.Sprintf("%.0f s (%.0f ms)", t.Sub(pinStart).Seconds(), w))
		}
	}
	if len(slowAt) > 0 {
		fmt.Fprintf(b.progressOut(), "pinned: windows whose wait p99 passed 50 ms, from the pin's start at %s: %s\n",
			pinStart.UTC().Format(time.RFC3339), strings.Join(slowAt, ", "))
	}
	if worstWait > 50 {
		fmt.Fprintf(b.progressOut(), "pinned: the worst window's wait p99, %.1f ms, began %.0f s into the pin, at %s\n",
			worstWait, worstFrom.Sub(pinStart).Seconds(), worstFrom.UTC().Format(time.RFC3339))
	}
	// Recovery: from the commit until the last task that had waited more
	// than 100 ms started.
	recovery := 0.0
	starts.mu.Lock()
	for i, at := range starts.at {
		if t := time.Unix(0, at); t.After(pinEnd) && starts.waits[i] > 100*time.Millisecond {
			recovery = max(recovery, t.Sub(pinEnd).Seconds())
		}
	}
	starts.mu.Unlock()
	return []measure{
		{metric: "enqueued clean", unit: "tasks/s", value: float64(enqAtPin) / pinStart.Sub(start).Seconds()},
		{metric: "enqueued pinned", unit: "tasks/s", value: float64(enqAtCommit-enqAtPin) / pinEnd.Sub(pinStart).Seconds()},
		{metric: "throughput clean", unit: "tasks/s", value: cleanRate},
		{metric: "throughput pinned (mean)", unit: "tasks/s", value: pinnedRate},
		{metric: "pinned / clean (mean)", unit: "ratio", value: pinnedRate / cleanRate, target: &target{atLeast: true, v: 0.7}},
		{metric: "pinned / clean (worst 10 s)", unit: "ratio", value: worst / cleanRate, target: &target{atLeast: true, v: 0.9}},
		{metric: "claim p99 clean", unit: "ms", value: p99(timer.between(cleanFrom, pinStart))},
		{metric: "claim p99 pinned", unit: "ms", value: p99(timer.between(pinStart, pinEnd)), target: &target{v: 100}},
		{metric: "task wait p99 clean", unit: "ms", value: p99(cleanWaits)},
		{metric: "task wait p99 pinned", unit: "ms", value: p99(pinnedWaits)},
		{metric: "task wait p99, worst 10 s of the pin", unit: "ms", value: worstWait, target: &target{v: 50}},
		{metric: "task wait p99, first 10 s of the pin", unit: "ms", value: firstWait},
		{metric: "task wait p99, last 10 s of the pin", unit: "ms", value: lastWait},
		{metric: "10 s windows of the pin over 50 ms", unit: "count", value: float64(slowWindows)},
		{metric: "max backlog", unit: "tasks", value: float64(maxBacklog.Load())},
		{metric: "dead rows at commit", unit: "rows", value: float64(dead)},
		{metric: "recovery after commit", unit: "s", value: recovery},
		{metric: "tasks", unit: "tasks", value: float64(want)},
	}, nil
}
