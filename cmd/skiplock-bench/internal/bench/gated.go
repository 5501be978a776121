package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// The gated workload measures how fast places that tasks wait for are
// handed on: a cluster-wide concurrency limit of gatedSlots, and as many
// exclusive keys. gatedWorkers workers (each with its own pool, lock
// session and listener, as separate processes would have; default Config
// otherwise, the poll at its default second) work a backlog of tasks
// (Options.GatedTasks) whose handler takes a given time (Options.GatedWork),
// one pair of cases for each backlog and time.
// The ideal is every place busy all the time: gatedSlots / work tasks a
// second. Where the rest goes: each hand-off, from a handler's return to
// the start of the handler that the place it freed let run (the key's
// next task; under the limit, the next start after the earliest end not
// yet followed), and the handler's own overshoot, how much longer than
// work its wait took (the timer's, not the queue's).
const (
	gatedSlots   = 3
	gatedWorkers = 3
)

func (b *bencher) gated(ctx context.Context) error {
	var cases []benchCase
	for _, n := range b.opts.GatedTasks {
		for _, work := range b.opts.GatedWork {
			ideal := float64(gatedSlots) / work.Seconds()
			for _, kind := range []string{"limit", "exclusive"} {
				cases = append(cases, b.gatedCase(kind, n, work, ideal))
			}
		}
	}
	return b.alternate(ctx, cases)
}

// timerSlack is how much of a gated handler's time is left to a sleep of
// the thread rather than a timer (workFor).
const timerSlack = 2 * time.Millisecond

// workFor is a gated handler's work: it returns at deadline, or with
// ctx's error once ctx is done before the last timerSlack. A Go timer in a process with nothing to
// run fires on the network poller's wait, which counts in whole
// milliseconds: a 10 ms timer returned 0.29-0.64 ms late at p50 in this
// workload, time that counted against the queue though no place was
// free. So the timer waits for all but the last timerSlack, and a sleep
// of the thread (sleepThread) waits for the rest, as a handler blocked in
// a system call or on the network returns when its work is done.
func workFor(ctx context.Context, deadline time.Time) error {
	if d := time.Until(deadline) - timerSlack; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for d := time.Until(deadline); d > 0; d = time.Until(deadline) {
		sleepThread(d)
	}
	return nil
}

// gatedCase is one case of the gated workload: tasks of work each, under a
// limit or exclusive keys, measured against ideal tasks a second.
func (b *bencher) gatedCase(kind string, tasks int, work time.Duration, ideal float64) benchCase {
	name := fmt.Sprintf("%s slots=%d workers=%d tasks=%d work=%s", kind, gatedSlots, gatedWorkers, tasks, work)
	params := map[string]float64{"slots": gatedSlots, "procs": gatedWorkers, "tasks": float64(tasks), "work_ms": float64(work) / float64(time.Millisecond)}
	return benchCase{workload: WorkloadGated, name: name, params: params,
		run: func(ctx context.Context, run int) ([]measure, error) {
			elapsed, spans, err := b.workGated(ctx, kind, tasks, work, WorkloadGated+" "+name+runLabel(run, b.opts.Runs))
			if err != nil {
				return nil, err
			}
			r := rate(int64(tasks), elapsed)
			gaps, over := handOffs(spans, work)
			return []measure{
				{metric: "work", unit: "tasks/s", value: r},
				{metric: "of ideal", unit: "ratio", value: r / ideal, target: &target{atLeast: true, v: 0.85}},
				{metric: "places busy", unit: "ratio", value: busy(spans, elapsed)},
				{metric: "hand-off p50", unit: "ms", value: ms(percentile(gaps, 50))},
				{metric: "hand-off p90", unit: "ms", value: ms(percentile(gaps, 90))},
				{metric: "hand-off p99", unit: "ms", value: ms(percentile(gaps, 99))},
				{metric: "hand-off mean", unit: "ms", value: ms(mean(gaps))},
				{metric: "handler overshoot p50", unit: "ms", value: ms(percentile(over, 50))},
			}, nil
		}}
}

// busy is the share of the places' time that handlers ran: their spans'
// sum over gatedSlots places for elapsed. Against "of ideal", it counts
// each handler's own overshoot as the handler's time, not the queue's.
func busy(spans []handSpan, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	var ran time.Duration
	for _, sp := range spans {
		ran += sp.end.Sub(sp.start)
	}
	return float64(ran) / float64(gatedSlots*elapsed)
}

// handSpan is one run of a gated task's handler, as the handler saw it:
// key is its exclusive key's number, -1 under the limit.
type handSpan struct {
	key        int
	start, end time.Time
}

// handOffs returns, sorted, each hand-off's time (see gated) and each
// handler's overshoot.
func handOffs(spans []handSpan, work time.Duration) (gaps, over []time.Duration) {
	places := map[int][]handSpan{}
	for _, sp := range spans {
		places[sp.key] = append(places[sp.key], sp)
		over = append(over, sp.end.Sub(sp.start)-work)
	}
	for key, run := range places {
		starts := make([]time.Time, 0, len(run))
		ends := make([]time.Time, 0, len(run))
		for _, sp := range run {
			starts = append(starts, sp.start)
			ends = append(ends, sp.end)
		}
		slices.SortFunc(starts, time.Time.Compare)
		slices.SortFunc(ends, time.Time.Compare)
		// A key is one place; the limit is gatedSlots, and its i-th start
		// past the first gatedSlots follows its i-th end.
		lag := 1
		if key < 0 {
			lag = gatedSlots
		}
		for i := lag; i < len(starts); i++ {
			gaps = append(gaps, starts[i].Sub(ends[i-lag]))
		}
	}
	slices.Sort(gaps)
	slices.Sort(over)
	return gaps, over
}

// workGated runs one case and returns the time from the first task's start
// to the last one's end, and the handlers' spans.
func (b *bencher) workGated(ctx context.Context, kind string, n int, work time.Duration, label string) (time.Duration, []handSpan, error) {
	s, err := b.env.newSchema(ctx, 0)
	if err != nil {
		return 0, nil, err
	}
	defer s.drop()
	client := queue.New(s.pool)
	tasks := make([]queue.NewTask, n)
	for i := range tasks {
		tasks[i] = queue.NewTask{Name: "gated", Payload: i}
		if kind == "exclusive" {
			tasks[i].Options = []queue.Option{queue.WithExclusiveKey(fmt.Sprintf("key-%d", i%gatedSlots))}
		}
	}
	if kind == "limit" {
		if err := client.SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: gatedSlots}); err != nil {
			return 0, nil, err
		}
	}
	var mu sync.Mutex
	spans := make([]handSpan, 0, n)
	handlers := worker.Handlers{"gated": func(ctx context.Context, t *worker.Task) error {
		sp := handSpan{key: -1, start: time.Now()}
		if err := workFor(ctx, sp.start.Add(work)); err != nil {
			return err
		}
		sp.end = time.Now()
		if kind == "exclusive" {
			var i int
			if err := json.Unmarshal(t.Payload, &i); err != nil {
				return err
			}
			sp.key = i % gatedSlots
		}
		mu.Lock()
		spans = append(spans, sp)
		mu.Unlock()
		return nil
	}}
	logger := slog.New(slog.NewTextHandler(b.progressOut(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make(chan error, gatedWorkers)
	firsts := make([]*firstClaim, gatedWorkers)
	for i := range gatedWorkers {
		pool, err := s.newPool(ctx, 0)
		if err != nil {
			return 0, nil, err
		}
		defer pool.Close()
		firsts[i] = &firstClaim{done: make(chan struct{})}
		cfg := worker.Config{Mode: workerMode(b.opts.Mode), Logger: logger, Observer: firsts[i]}
		go func(pool *pgxpool.Pool) {
			errs <- worker.New(pool, cfg).Run(wctx, handlers)
		}(pool)
	}
	var elapsed time.Duration
	var werr error
	returned := 0
	// The backlog arrives at workers that are up: each has made its first
	// claim, on a new lock session whose backend loads its caches and
	// plans the claim then (tens of milliseconds), so that no worker's
	// start-up runs beside the hand-offs measured.
	for _, f := range firsts {
		select {
		case <-f.done:
		case werr = <-errs:
			returned++
			if werr == nil {
				werr = fmt.Errorf("a worker stopped before the tasks were enqueued")
			}
		case <-ctx.Done():
			werr = ctx.Err()
		}
		if werr != nil {
			break
		}
	}
	if werr == nil {
		_, werr = client.EnqueueMany(ctx, tasks)
	}
	var seconds float64
	every(ctx, 10*time.Millisecond, func() bool {
		if werr != nil {
			return false
		}
		select {
		case werr = <-errs:
			returned++
			if werr == nil {
				werr = fmt.Errorf("a worker stopped before the tasks were done")
			}
			return false
		default:
		}
		var done int
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE status = 'completed'").Scan(&done); err != nil {
			werr = err
			return false
		}
		b.prog.status("%s: %d/%d", label, done, n)
		if done == n {
			// From the first start to the last finish, as the table
			// records them: the workers' own start-up is not the hand-off
			// being measured.
			werr = s.pool.QueryRow(ctx, "SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM skiplock_tasks").Scan(&seconds)
			elapsed = time.Duration(seconds * float64(time.Second))
			return false
		}
		return true
	})
	stop()
	// Every worker's Run returns before its pool closes.
	for ; returned < gatedWorkers; returned++ {
		<-errs
	}
	if werr == nil && elapsed == 0 {
		werr = ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	return elapsed, spans, werr
}

// firstClaim is a gated worker's Observer: done closes at its first claim.
type firstClaim struct {
	worker.NopObserver
	once sync.Once
	done chan struct{}
}

func (f *firstClaim) Claimed(string, int, int) { f.once.Do(func() { close(f.done) }) }
