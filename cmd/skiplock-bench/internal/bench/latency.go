package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// latency: an idle worker with default settings, and one producer enqueuing
// one task at a time on a fixed schedule. Both live in this process, so one
// clock measures from the moment Enqueue returns (its transaction has
// committed) to the moment the handler is called; tasks are matched by ID.
// The worker is in-process here, unlike the other workloads, precisely for
// that shared clock.
func (b *bencher) latency(ctx context.Context) error {
	for _, r := range b.opts.Rates {
		name := fmt.Sprintf("rate=%s/s", formatNumber(r))
		params := map[string]float64{"rate": r}
		err := b.repeat(ctx, WorkloadLatency, name, params, func(ctx context.Context, run int) ([]measure, error) {
			return b.latencyRun(ctx, r, WorkloadLatency+" "+name+runLabel(run, b.opts.Runs))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *bencher) latencyRun(ctx context.Context, perSec float64, label string) ([]measure, error) {
	s, producerPool, err := b.env.newRunSchema(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	if err := warmPool(ctx, producerPool, 1); err != nil {
		return nil, err
	}
	client := queue.New(producerPool)

	var mu sync.Mutex
	started := map[int64]time.Time{}
	handlers := worker.Handlers{noopTask: func(_ context.Context, t *worker.Task) error {
		now := time.Now()
		mu.Lock()
		started[t.ID] = now
		mu.Unlock()
		return nil
	}}
	handledAll := func(ids []int64) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if _, ok := started[id]; !ok {
				return false
			}
		}
		return true
	}
	w := worker.New(s.pool, worker.Config{Mode: workerMode(b.opts.Mode), Logger: slog.New(slog.NewTextHandler(b.progressOut(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	workerCtx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx, handlers) }()
	defer func() {
		stopWorker()
		<-workerDone
	}()

	// enqueue runs n tasks on the schedule, returning each one's commit time.
	enqueue := func(n int, what string) (map[int64]time.Time, error) {
		commits := make(map[int64]time.Time, n)
		ids := make([]int64, 0, n)
		start := time.Now()
		for i := range n {
			if d := time.Until(start.Add(time.Duration(float64(i) / perSec * float64(time.Second)))); d > 0 {
				time.Sleep(d)
			}
			id, err := client.Enqueue(ctx, noopTask, benchPayload{N: i})
			if err != nil {
				return nil, err
			}
			commits[id.ID] = time.Now()
			ids = append(ids, id.ID)
			b.prog.status("%s: %s %d/%d", label, what, i+1, n)
		}
		deadline := time.Now().Add(30 * time.Second)
		for !handledAll(ids) {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%s: tasks not handled within 30s of their enqueue", what)
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			time.Sleep(5 * time.Millisecond)
		}
		return commits, nil
	}

	// Warm up: the first tasks may arrive before the worker listens, and
	// pay for its first claim's planning.
	if _, err := enqueue(max(int(perSec/10), 20), "warm-up"); err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond)
	n := max(int(perSec*b.opts.LatencyDuration.Seconds()), 1)
	start := time.Now()
	commits, err := enqueue(n, "enqueue")
	if err != nil {
		return nil, err
	}
	achieved := rate(int64(n), time.Since(start))

	lat := make([]time.Duration, 0, n)
	early := 0
	mu.Lock()
	for id, c := range commits {
		d := started[id].Sub(c)
		if d < 0 {
			// The handler started before Enqueue returned: the
			// notification left with the commit and the worker was faster
			// than the acknowledgement.
			early++
			d = 0
		}
		lat = append(lat, d)
	}
	mu.Unlock()
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return []measure{
		{metric: "p50", unit: "ms", value: ms(percentile(lat, 50)), target: &target{v: 2}},
		{metric: "p90", unit: "ms", value: ms(percentile(lat, 90))},
		{metric: "p99", unit: "ms", value: ms(percentile(lat, 99)), target: &target{v: 10}},
		{metric: "p99.9", unit: "ms", value: ms(percentile(lat, 99.9))},
		{metric: "max", unit: "ms", value: ms(lat[len(lat)-1])},
		{metric: "mean", unit: "ms", value: ms(sum / time.Duration(len(lat)))},
		{metric: "started before Enqueue returned", unit: "%", value: 100 * float64(early) / float64(len(lat))},
		{metric: "achieved rate", unit: "tasks/s", value: achieved},
	}, nil
}
