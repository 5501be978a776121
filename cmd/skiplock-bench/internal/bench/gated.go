package bench

import (
	"context"
	"fmt"
	"log/slog"
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
// second.
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

// gatedCase is one case of the gated workload: tasks of work each, under a
// limit or exclusive keys, measured against ideal tasks a second.
func (b *bencher) gatedCase(kind string, tasks int, work time.Duration, ideal float64) benchCase {
	name := fmt.Sprintf("%s slots=%d workers=%d tasks=%d work=%s", kind, gatedSlots, gatedWorkers, tasks, work)
	params := map[string]float64{"slots": gatedSlots, "procs": gatedWorkers, "tasks": float64(tasks), "work_ms": float64(work) / float64(time.Millisecond)}
	return benchCase{workload: WorkloadGated, name: name, params: params,
		run: func(ctx context.Context, run int) ([]measure, error) {
			elapsed, err := b.workGated(ctx, kind, tasks, work, WorkloadGated+" "+name+runLabel(run, b.opts.Runs))
			if err != nil {
				return nil, err
			}
			r := rate(int64(tasks), elapsed)
			return []measure{
				{metric: "work", unit: "tasks/s", value: r},
				{metric: "of ideal", unit: "ratio", value: r / ideal, target: &target{atLeast: true, v: 0.85}},
			}, nil
		}}
}

// workGated runs one case and returns the time from the first task's start
// to the last one's end.
func (b *bencher) workGated(ctx context.Context, kind string, n int, work time.Duration, label string) (time.Duration, error) {
	s, err := b.env.newSchema(ctx, 0)
	if err != nil {
		return 0, err
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
			return 0, err
		}
	}
	if _, err := client.EnqueueMany(ctx, tasks); err != nil {
		return 0, err
	}
	handlers := worker.Handlers{"gated": func(ctx context.Context, _ *worker.Task) error {
		select {
		case <-time.After(work):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	logger := slog.New(slog.NewTextHandler(b.progressOut(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make(chan error, gatedWorkers)
	for range gatedWorkers {
		pool, err := s.newPool(ctx, 0)
		if err != nil {
			return 0, err
		}
		defer pool.Close()
		go func(pool *pgxpool.Pool) {
			errs <- worker.New(pool, worker.Config{Mode: workerMode(b.opts.Mode), Logger: logger}).Run(wctx, handlers)
		}(pool)
	}
	var elapsed time.Duration
	var werr error
	returned := 0
	var seconds float64
	every(ctx, 10*time.Millisecond, func() bool {
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
	return elapsed, werr
}
