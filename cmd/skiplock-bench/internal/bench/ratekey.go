package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// The rate-key workload measures the rate a per-key rate limit allows
// across processes: rateKeyProcs worker processes (default Config, the poll
// at its default second) share a limit of rateKeyLimit tasks a second per
// key on the bench's no-op task, and work a backlog of
// Options.RateKeyBacklog tasks for each of rateKeyKeys keys, enqueued key
// after key. Per key, the rate is its tasks over the whole windows (one
// second each, aligned to the epoch on the database clock) from its first
// start to its last (all keys: the windows of all), at least one: the
// ideal is rateKeyLimit. "most in a window" is the
// most tasks of one key that started within one window, as the claims'
// start times (taken just after the grant) place them.
const (
	rateKeyKeys  = 5
	rateKeyProcs = 3
	rateKeyLimit = 10
)

// DefaultRateKeyBacklog is Options.RateKeyBacklog's default: 20 windows
// per key.
const DefaultRateKeyBacklog = 200

func (b *bencher) rateKey(ctx context.Context) error {
	backlog := b.opts.RateKeyBacklog
	name := fmt.Sprintf("keys=%d backlog=%d/key limit=%d/s/key procs=%d", rateKeyKeys, backlog, rateKeyLimit, rateKeyProcs)
	params := map[string]float64{"keys": rateKeyKeys, "backlog": float64(backlog), "limit": rateKeyLimit, "procs": rateKeyProcs}
	return b.repeat(ctx, WorkloadRateKey, name, params, func(ctx context.Context, run int) ([]measure, error) {
		return b.workRateKey(ctx, WorkloadRateKey+" "+name+runLabel(run, b.opts.Runs))
	})
}

func (b *bencher) workRateKey(ctx context.Context, label string) ([]measure, error) {
	backlog := b.opts.RateKeyBacklog
	s, err := b.env.newSchema(ctx, 0)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	var tasks []queue.NewTask
	for k := range rateKeyKeys {
		for i := range backlog {
			tasks = append(tasks, queue.NewTask{Name: noopTask, Payload: i, Options: []queue.Option{queue.WithLimitKey(fmt.Sprintf("customer-%d", k))}})
		}
	}
	if _, err := queue.New(s.pool).EnqueueMany(ctx, tasks); err != nil {
		return nil, err
	}
	spec := workerSpec{URL: b.env.url, Schema: s.name, Mode: b.opts.Mode,
		RateLimits: []worker.RateLimit{{Name: noopTask, Limit: rateKeyLimit, Per: time.Second, PerKey: true}}}
	ps, err := startProcs(ctx, b.opts.Self, rateKeyProcs, spec, b.opts.Progress)
	if err != nil {
		return nil, err
	}
	defer ps.stop()
	if err := ps.start(); err != nil {
		return nil, err
	}
	want := int64(len(tasks))
	stopProgress := b.prog.track(func() string {
		return fmt.Sprintf("%s: %d/%d tasks", label, ps.done(), want)
	})
	defer stopProgress()
	for ps.done() < want {
		if err := ps.failed(); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	// Per key: tasks over the windows spanned, and the most in one window.
	var perKey, slowest, fastest, most float64
	if err := s.pool.QueryRow(ctx, `
		WITH k AS (
			SELECT limit_key, count(*)::float8 / greatest(1, ceil(extract(epoch FROM max(started_at))) - floor(extract(epoch FROM min(started_at)))) AS rate
			FROM skiplock_tasks GROUP BY limit_key
		), w AS (
			SELECT count(*) AS n FROM skiplock_tasks GROUP BY limit_key, floor(extract(epoch FROM started_at))
		)
		SELECT avg(k.rate), min(k.rate), max(k.rate), (SELECT max(n) FROM w)::float8 FROM k`).Scan(&perKey, &slowest, &fastest, &most); err != nil {
		return nil, err
	}
	var all float64
	if err := s.pool.QueryRow(ctx, `
		SELECT count(*)::float8 / greatest(1, ceil(extract(epoch FROM max(started_at))) - floor(extract(epoch FROM min(started_at))))
		FROM skiplock_tasks`).Scan(&all); err != nil {
		return nil, err
	}
	return []measure{
		{metric: "per key", unit: "tasks/s", value: perKey},
		{metric: "slowest key", unit: "tasks/s", value: slowest},
		{metric: "fastest key", unit: "tasks/s", value: fastest},
		{metric: "of limit", unit: "ratio", value: perKey / rateKeyLimit, target: &target{atLeast: true, v: 0.9}},
		{metric: "most in a window", unit: "tasks", value: most},
		{metric: "all keys", unit: "tasks/s", value: all},
	}, nil
}
