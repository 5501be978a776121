package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/queue"
)

// SustainedSample is one look at the sustained workload.
type SustainedSample struct {
	// Elapsed is seconds since the start.
	Elapsed   float64 `json:"t"`
	Enqueued  int64   `json:"enqueued"`
	Completed int64   `json:"completed"`
	// InRate and OutRate are tasks per second since the previous sample.
	InRate  float64 `json:"in_per_s"`
	OutRate float64 `json:"out_per_s"`
	// Backlog is enqueued minus completed.
	Backlog    int64 `json:"backlog"`
	WorkerRSS  int64 `json:"worker_rss_bytes"`
	WorkerHeap int64 `json:"worker_heap_bytes"`
	// TableBytes is skiplock_tasks with its indexes and TOAST.
	TableBytes      int64 `json:"table_bytes"`
	ClaimIndexBytes int64 `json:"claim_index_bytes"`
	DeadRows        int64 `json:"dead_rows"`
	// TaskLocks is the number of task advisory locks held at the time.
	TaskLocks int64 `json:"task_locks"`
}

// sustained: a producer enqueues at SustainedRate for Duration while one
// worker process with default settings works; samples show whether
// throughput, memory and table size hold steady. The producer enqueues with
// EnqueueMany every 10ms (SustainedRate/100 tasks a call), so that the load
// on the server is the worker's, not a producer's commit rate.
func (b *bencher) sustained(ctx context.Context) error {
	o := b.opts
	name := fmt.Sprintf("rate=%s/s duration=%s", formatNumber(o.SustainedRate), o.Duration)
	if o.Purge > 0 {
		name += fmt.Sprintf(" purge=%s", o.Purge)
	}
	params := map[string]float64{"rate": o.SustainedRate, "duration_s": o.Duration.Seconds(), "purge_s": o.Purge.Seconds()}
	return b.repeat(ctx, WorkloadSustained, name, params, func(ctx context.Context, run int) ([]measure, error) {
		return b.sustainedRun(ctx, WorkloadSustained+" "+name+runLabel(run, o.Runs))
	})
}

func (b *bencher) sustainedRun(ctx context.Context, label string) ([]measure, error) {
	o := b.opts
	s, producerPool, err := b.env.newRunSchema(ctx, 2)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	client := queue.New(producerPool)

	ps, err := startProcs(ctx, o.Self, 1, workerSpec{URL: b.env.url, Schema: s.name, Mode: o.Mode,
		Settings: o.WorkerSettings, LockSettings: o.LockSessionSettings}, o.Progress)
	if err != nil {
		return nil, err
	}
	defer ps.stop()
	if err := ps.start(); err != nil {
		return nil, err
	}

	start := time.Now()
	runCtx, stopRun := context.WithTimeout(ctx, o.Duration)
	defer stopRun()
	var enqueued, purged atomic.Int64
	// failed carries the first error of the producer or the purger; both
	// stop at the end of the run.
	failed := make(chan error, 2)
	var helpers sync.WaitGroup
	defer helpers.Wait()
	defer stopRun()
	helpers.Go(func() {
		batch := make([]queue.NewTask, 0, int(o.SustainedRate/50)+1)
		every(runCtx, 10*time.Millisecond, func() bool {
			due := int64(o.SustainedRate*time.Since(start).Seconds()) - enqueued.Load()
			if due <= 0 {
				return true
			}
			batch = batch[:0]
			for i := range due {
				batch = append(batch, queue.NewTask{Name: noopTask, Payload: benchPayload{N: int(enqueued.Load() + i)}})
			}
			if _, err := client.EnqueueMany(runCtx, batch); err != nil {
				if runCtx.Err() == nil {
					failed <- fmt.Errorf("producer: %w", err)
				}
				return false
			}
			enqueued.Add(due)
			return true
		})
	})
	if o.Purge > 0 {
		helpers.Go(func() {
			every(runCtx, o.Purge, func() bool {
				res, err := client.Purge(runCtx, queue.PurgeRequest{Filter: queue.Filter{
					Statuses: []queue.Status{queue.StatusCompleted}, FinishedBefore: time.Now().Add(-o.Purge),
				}})
				purged.Add(res.Changed)
				if err != nil && runCtx.Err() == nil {
					failed <- fmt.Errorf("purge: %w", err)
				}
				return err == nil
			})
		})
	}

	interval := min(max(o.Duration/60, time.Second), 10*time.Second)
	var samples []SustainedSample
	last := SustainedSample{}
	var lastMu sync.Mutex // the progress line reads last from its own goroutine
	sample := func() error {
		now := time.Since(start).Seconds()
		x := SustainedSample{Elapsed: now, Enqueued: enqueued.Load(), Completed: ps.done(), WorkerRSS: ps.rss(), WorkerHeap: ps.heap()}
		dt := now - last.Elapsed
		x.InRate = float64(x.Enqueued-last.Enqueued) / dt
		x.OutRate = float64(x.Completed-last.Completed) / dt
		x.Backlog = x.Enqueued - x.Completed
		err := s.pool.QueryRow(ctx, `SELECT pg_total_relation_size('skiplock_tasks'), pg_relation_size('skiplock_tasks_claim_idx'),
			coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'skiplock_tasks'::regclass), 0),
			(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid = 'skiplock_tasks'::regclass::oid)`).
			Scan(&x.TableBytes, &x.ClaimIndexBytes, &x.DeadRows, &x.TaskLocks)
		if err != nil {
			return err
		}
		samples = append(samples, x)
		lastMu.Lock()
		last = x
		lastMu.Unlock()
		return nil
	}
	stopProgress := b.prog.track(func() string {
		lastMu.Lock()
		defer lastMu.Unlock()
		return fmt.Sprintf("%s: %s/%s, %s in, %s out, backlog %s, worker RSS %.0f MiB", label,
			time.Since(start).Truncate(time.Second), o.Duration, formatNumber(last.InRate), formatNumber(last.OutRate),
			formatNumber(float64(last.Backlog)), mib(last.WorkerRSS))
	})
	defer stopProgress()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for runCtx.Err() == nil {
		select {
		case <-runCtx.Done():
		case err := <-failed:
			// Keep what led up to the failure: it is the result.
			b.report.Sustained = samples
			return nil, fmt.Errorf("%w (after %s)", err, time.Since(start).Round(time.Second))
		case <-tick.C:
			if err := ps.failed(); err != nil {
				return nil, err
			}
			if err := sample(); err != nil {
				return nil, err
			}
		}
	}
	helpers.Wait()
	if err := failure(ctx, failed); err != nil {
		return nil, err
	}
	stopProgress()

	// Drain what is left, then stop the worker.
	drainStart := time.Now()
	for ps.done() < enqueued.Load() {
		if time.Since(drainStart) > time.Minute {
			return nil, fmt.Errorf("backlog of %d not drained a minute after the producer stopped", enqueued.Load()-ps.done())
		}
		if err := ps.failed(); err != nil {
			return nil, err
		}
		time.Sleep(10 * time.Millisecond)
	}
	drain := time.Since(drainStart)
	if err := ps.stop(); err != nil {
		return nil, err
	}
	if len(samples) < 4 {
		return nil, fmt.Errorf("only %d samples; run longer", len(samples))
	}
	b.report.Sustained = samples

	// Compare the first and last quarters, skipping the first sample (the
	// worker's start).
	quarter := max(len(samples)/4, 1)
	meanOut := func(xs []SustainedSample) float64 {
		var sum float64
		for _, x := range xs {
			sum += x.OutRate
		}
		return sum / float64(len(xs))
	}
	first, lastQ := samples[1:1+quarter], samples[len(samples)-quarter:]
	var maxBacklog, maxRSS, maxLocks int64
	for _, x := range samples {
		maxBacklog, maxRSS, maxLocks = max(maxBacklog, x.Backlog), max(maxRSS, x.WorkerRSS), max(maxLocks, x.TaskLocks)
	}
	end := samples[len(samples)-1]
	return []measure{
		{metric: "completed", unit: "tasks/s", value: float64(end.Completed) / end.Elapsed},
		{metric: "out rate, first quarter", unit: "tasks/s", value: meanOut(first)},
		{metric: "out rate, last quarter", unit: "tasks/s", value: meanOut(lastQ)},
		{metric: "max backlog", unit: "tasks", value: float64(maxBacklog)},
		{metric: "drain after stop", unit: "s", value: drain.Seconds()},
		{metric: "max task locks held (samples)", unit: "locks", value: float64(maxLocks)},
		{metric: "worker RSS, first quarter", unit: "MiB", value: mib(samples[quarter].WorkerRSS)},
		{metric: "worker RSS, end", unit: "MiB", value: mib(end.WorkerRSS)},
		{metric: "worker RSS, max", unit: "MiB", value: mib(maxRSS)},
		{metric: "worker heap, end", unit: "MiB", value: mib(end.WorkerHeap)},
		{metric: "table size, end", unit: "MiB", value: mib(end.TableBytes)},
		{metric: "table growth", unit: "bytes/task", value: float64(end.TableBytes-samples[0].TableBytes) / float64(end.Completed-samples[0].Completed)},
		{metric: "claim index, end", unit: "MiB", value: mib(end.ClaimIndexBytes)},
		{metric: "dead rows, end", unit: "rows", value: float64(end.DeadRows)},
		{metric: "purged", unit: "tasks", value: float64(purged.Load())},
	}, nil
}
