package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/queue"
)

// enqueueCopy: bulk enqueue of a batch of tasks with queue's EnqueueMany
// (COPY when no task has a unique key, else INSERT ... SELECT unnest, 5,000
// rows a statement), into a fresh schema; building the []NewTask is not
// timed, encoding the payloads is.
func (b *bencher) enqueueCopy(ctx context.Context) error {
	bulk := &target{atLeast: true, v: 150_000}
	for _, n := range b.opts.Tasks {
		name := fmt.Sprintf("tasks=%d", n)
		params := map[string]float64{"tasks": float64(n)}
		err := b.repeat(ctx, WorkloadEnqueueCopy, name, params, func(ctx context.Context, run int) ([]measure, error) {
			label := WorkloadEnqueueCopy + " " + name + runLabel(run, b.opts.Runs)
			var out []measure
			ways := []struct {
				metric string
				fn     func(ctx context.Context, pool *pgxpool.Pool) error
			}{
				{"EnqueueMany", func(ctx context.Context, pool *pgxpool.Pool) error {
					tasks := make([]queue.NewTask, n)
					for i := range tasks {
						tasks[i] = queue.NewTask{Name: noopTask, Payload: benchPayload{N: i}}
					}
					start := time.Now()
					ids, err := queue.New(pool).EnqueueMany(ctx, tasks)
					if err == nil && len(ids) != n {
						err = fmt.Errorf("EnqueueMany returned %d ids for %d tasks", len(ids), n)
					}
					out = append(out, measure{metric: "EnqueueMany", unit: "tasks/s", value: rate(int64(n), time.Since(start)), target: bulk})
					return err
				}},
			}
			for _, way := range ways {
				b.prog.status("%s: %s", label, way.metric)
				s, err := b.env.newSchema(ctx, 0)
				if err != nil {
					return nil, err
				}
				err = way.fn(ctx, s.pool)
				if err == nil {
					err = s.expect(ctx, n)
				}
				s.drop()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", way.metric, err)
				}
			}
			return out, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// expect checks that the schema holds n pending tasks.
func (s *schema) expect(ctx context.Context, n int) error {
	var got int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE status = 'pending'").Scan(&got); err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("%d tasks in the table, want %d", got, n)
	}
	return nil
}

// enqueueSingle: Producers goroutines call Enqueue, one task per call and
// per transaction, for EnqueueDuration.
func (b *bencher) enqueueSingle(ctx context.Context) error {
	o := b.opts
	name := fmt.Sprintf("producers=%d pool=%d", o.Producers, o.PoolConns)
	params := map[string]float64{"producers": float64(o.Producers), "pool_conns": float64(o.PoolConns)}
	return b.repeat(ctx, WorkloadEnqueueSingle, name, params, func(ctx context.Context, run int) ([]measure, error) {
		label := WorkloadEnqueueSingle + " " + name + runLabel(run, o.Runs)
		var out []measure
		for _, way := range []string{"Enqueue"} {
			s, err := b.env.newSchema(ctx, o.PoolConns)
			if err != nil {
				return nil, err
			}
			client := queue.New(s.pool)
			ms, err := b.producers(ctx, s, label+": "+way, way, client.Enqueue)
			s.drop()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", way, err)
			}
			out = append(out, ms...)
		}
		return out, nil
	})
}

// producers runs Options.Producers goroutines calling enqueue for
// EnqueueDuration.
func (b *bencher) producers(ctx context.Context, s *schema, label, metric string,
	enqueue func(ctx context.Context, name string, payload any, opts ...queue.Option) (queue.EnqueueResult, error)) ([]measure, error) {
	o := b.opts
	if err := warmPool(ctx, s.pool, o.PoolConns); err != nil {
		return nil, err
	}
	var count atomic.Int64
	var mu sync.Mutex
	var calls []time.Duration
	runCtx, cancel := context.WithTimeout(ctx, o.EnqueueDuration)
	defer cancel()
	start := time.Now()
	stopProgress := b.prog.track(func() string {
		n := count.Load()
		return fmt.Sprintf("%s: %s tasks, %s/s", label, formatNumber(float64(n)), formatNumber(rate(n, time.Since(start))))
	})
	defer stopProgress()
	var wg sync.WaitGroup
	errs := make(chan error, o.Producers)
	for p := range o.Producers {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				calls = append(calls, mine...)
				mu.Unlock()
			}()
			for i := 0; runCtx.Err() == nil; i++ {
				t0 := time.Now()
				_, err := enqueue(runCtx, noopTask, benchPayload{N: p<<32 | i})
				if err != nil {
					if runCtx.Err() == nil {
						errs <- err
					}
					return
				}
				mine = append(mine, time.Since(t0))
				count.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()
	if err := failure(ctx, errs); err != nil {
		return nil, err
	}
	n := count.Load()
	// A call cut off by the end of the run may have committed before it
	// noticed: up to one task per producer more than counted.
	var got int64
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks").Scan(&got); err != nil {
		return nil, err
	}
	if got < n || got > n+int64(o.Producers) {
		return nil, fmt.Errorf("%d tasks in the table, %d enqueued", got, n)
	}
	slices.Sort(calls)
	return []measure{
		{metric: metric, unit: "tasks/s", value: rate(n, elapsed), target: &target{atLeast: true, v: 16_000}},
		{metric: metric + ", call p50", unit: "ms", value: ms(percentile(calls, 50))},
		{metric: metric + ", call p99", unit: "ms", value: ms(percentile(calls, 99))},
	}, nil
}

// warmPool opens n connections, so that connecting is not measured.
func warmPool(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}
