package bench

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// The bulk workload measures bulk handlers on a bulk insert: a backlog of
// --tasks tasks, each of which inserts one row into a table of the
// application's, worked by one worker with the default Config in this
// process, two ways in alternation: a handler per task doing a one-row
// INSERT, and a bulk handler (worker.BulkHandler, bulkMaxSize tasks,
// bulkMaxWait) doing one multi-row INSERT per call. The inserts go
// through a pool of their own (pgxpool's default size), as an
// application's would. The rate is timed from the first task's start to
// the last one's end, as the table records them; every row is checked.
const (
	bulkTask    = "row.insert"
	bulkMaxSize = 100
	bulkMaxWait = 100 * time.Millisecond
)

func (b *bencher) bulk(ctx context.Context) error {
	var cases []benchCase
	for _, n := range b.opts.Tasks {
		for _, kind := range []string{"single", "bulk"} {
			name := fmt.Sprintf("%s tasks=%d", kind, n)
			params := map[string]float64{"tasks": float64(n)}
			if kind == "bulk" {
				name += fmt.Sprintf(" max-size=%d max-wait=%s", bulkMaxSize, bulkMaxWait)
				params["max_size"] = bulkMaxSize
			}
			cases = append(cases, benchCase{workload: WorkloadBulk, name: name, params: params,
				run: func(ctx context.Context, run int) ([]measure, error) {
					elapsed, calls, err := b.workBulk(ctx, kind, n, WorkloadBulk+" "+name+runLabel(run, b.opts.Runs))
					if err != nil {
						return nil, err
					}
					return []measure{
						{metric: "work", unit: "tasks/s", value: rate(int64(n), elapsed)},
						{metric: "tasks per call", unit: "tasks", value: float64(n) / float64(max(calls, 1))},
					}, nil
				}})
		}
	}
	return b.alternate(ctx, cases)
}

// workBulk runs one case and returns the time from the first task's start
// to the last one's end, and how many calls of the handler it took.
func (b *bencher) workBulk(ctx context.Context, kind string, n int, label string) (_ time.Duration, calls int64, _ error) {
	s, err := b.env.newSchema(ctx, 0)
	if err != nil {
		return 0, 0, err
	}
	defer s.drop()
	if _, err := s.pool.Exec(ctx, "CREATE TABLE bench_rows (n int NOT NULL, inserted_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return 0, 0, err
	}
	const chunk = 50_000
	client := queue.New(s.pool)
	for done := 0; done < n; {
		tasks := make([]queue.NewTask, 0, min(n-done, chunk))
		for i := done; i < min(n, done+chunk); i++ {
			tasks = append(tasks, queue.NewTask{Name: bulkTask, Payload: benchPayload{N: i}})
		}
		if _, err := client.EnqueueMany(ctx, tasks); err != nil {
			return 0, 0, fmt.Errorf("preloading: %w", err)
		}
		done += len(tasks)
		b.prog.status("%s: preloading %s/%s tasks", label, formatNumber(float64(done)), formatNumber(float64(n)))
	}
	if b.opts.Vacuum {
		if err := s.vacuum(ctx); err != nil {
			return 0, 0, fmt.Errorf("vacuum: %w", err)
		}
	}
	app, err := s.newPool(ctx, 0)
	if err != nil {
		return 0, 0, err
	}
	defer app.Close()
	handlers := worker.Handlers{}
	var ncalls atomic.Int64
	if kind == "single" {
		worker.Handle(handlers, func(ctx context.Context, t *worker.TaskOf[benchRow]) error {
			ncalls.Add(1)
			_, err := app.Exec(ctx, "INSERT INTO bench_rows (n) VALUES ($1)", t.Args.N)
			return err
		})
	} else {
		worker.HandleBulk(handlers, worker.BulkOf[benchRow]{MaxSize: bulkMaxSize, MaxWait: bulkMaxWait,
			Handle: func(ctx context.Context, tasks []*worker.TaskOf[benchRow]) []error {
				ncalls.Add(1)
				ns := make([]int32, len(tasks))
				for i, t := range tasks {
					ns[i] = int32(t.Args.N)
				}
				_, err := app.Exec(ctx, "INSERT INTO bench_rows (n) SELECT unnest($1::int[])", ns)
				if err == nil {
					return nil
				}
				errs := make([]error, len(tasks))
				for i := range errs {
					errs[i] = err
				}
				return errs
			}})
	}
	logger := slog.New(slog.NewTextHandler(b.progressOut(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make(chan error, 1)
	go func() {
		errs <- worker.New(s.pool, worker.Config{Mode: workerMode(b.opts.Mode), Logger: logger}).Run(wctx, handlers)
	}()
	var elapsed time.Duration
	var werr error
	stopped := false
	every(ctx, 20*time.Millisecond, func() bool {
		select {
		case werr = <-errs:
			stopped = true
			if werr == nil {
				werr = fmt.Errorf("the worker stopped before the tasks were done")
			}
			return false
		default:
		}
		var done int
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE status = 'completed'").Scan(&done); err != nil {
			werr = err
			return false
		}
		b.prog.status("%s: %s/%s", label, formatNumber(float64(done)), formatNumber(float64(n)))
		if done < n {
			return true
		}
		var seconds float64
		var rows int
		werr = s.pool.QueryRow(ctx, "SELECT extract(epoch FROM max(finished_at) - min(started_at)), (SELECT count(DISTINCT n) FROM bench_rows) FROM skiplock_tasks").
			Scan(&seconds, &rows)
		if werr == nil && rows != n {
			werr = fmt.Errorf("%d distinct rows inserted by %d completed tasks", rows, n)
		}
		elapsed = time.Duration(seconds * float64(time.Second))
		return false
	})
	stop()
	if !stopped {
		if err := <-errs; err != nil && werr == nil {
			werr = err
		}
	}
	if werr == nil && elapsed == 0 {
		werr = ctx.Err()
	}
	return elapsed, ncalls.Load(), werr
}

// benchRow is the bulk workload's typed task.
type benchRow struct {
	N int `json:"n"`
}

func (benchRow) TaskName() string { return bulkTask }
