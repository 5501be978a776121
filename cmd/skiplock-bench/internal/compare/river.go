package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/cpustat"
)

// River's side of the compare, in a process of its own: River as a
// dependency of the bench's module only (the library never imports it).
// The settings are River's own benchmark's, which it publishes its figures
// with, rather than its defaults (100 workers and a 100 ms fetch cooldown,
// which cap it near 1,000 jobs/s here):
const (
	riverMaxWorkers        = 2000
	riverFetchCooldown     = 2 * time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
)

// riverNoop is the no-op job.
type riverNoop struct {
	N int `json:"n"`
}

func (riverNoop) Kind() string { return "compare_noop" }

type riverNoopWorker struct {
	river.WorkerDefaults[riverNoop]
}

func (riverNoopWorker) Work(context.Context, *river.Job[riverNoop]) error { return nil }

// riverVersion is the version of River built into this binary, "" when
// its build info does not say.
func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				return d.Version
			}
		}
	}
	return "" // a test binary's build info lists no dependencies
}

// runRiver migrates the fresh database with rivermigrate, inserts n no-op
// jobs by COPY (InsertManyFast) with the client not started, then starts
// it; the clock runs from Start until the n-th completion event, which
// River sends once the completer has persisted the job's state. Then the
// client is stopped and the database must show n completed jobs.
func runRiver(ctx context.Context, n int, dsn string, stdout, stderr io.Writer) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverNoopWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
		Logger:            slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return err
	}

	fmt.Fprintf(stderr, "river: inserting %d jobs (InsertManyFast)\n", n)
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: riverNoop{N: i}}
	}
	start := time.Now()
	inserted, err := client.InsertManyFast(ctx, params)
	if err != nil {
		return fmt.Errorf("InsertManyFast: %w", err)
	}
	if inserted != n {
		return fmt.Errorf("InsertManyFast inserted %d jobs, want %d", inserted, n)
	}
	insert := time.Since(start)

	// Events the channel has no room for are dropped: room for all.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer cancel()
	fmt.Fprintf(stderr, "river: working (%d workers)\n", riverMaxWorkers)
	workStart, cpu := time.Now(), cpustat.Start()
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("starting the client: %w", err)
	}
	completed, failed := 0, 0
	for completed+failed < n && err == nil {
		select {
		case ev, ok := <-events:
			if !ok {
				err = errors.New("the event subscription closed early")
			} else if ev.Kind == river.EventKindJobCompleted {
				completed++
			} else {
				failed++
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	elapsed := time.Since(workStart)
	var cpuOut strings.Builder
	cpu.Report(&cpuOut, n)
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	if stopErr := client.Stop(stopCtx); stopErr != nil && err == nil {
		err = fmt.Errorf("stopping the client: %w", stopErr)
	}
	if err != nil {
		return fmt.Errorf("after %d completions: %w", completed, err)
	}
	var inDB int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&inDB); err != nil {
		return err
	}
	if failed > 0 || inDB != n {
		return fmt.Errorf("%d jobs failed or were cancelled, %d are completed in the database, want %d", failed, inDB, n)
	}
	fmt.Fprintf(stdout, "system=river version=%s n=%d workers=%d fetch_cooldown=%s fetch_poll_interval=%s insert_per_s=%.0f\n",
		riverVersion(), n, riverMaxWorkers, riverFetchCooldown, riverFetchPollInterval, float64(n)/insert.Seconds())
	io.WriteString(stdout, cpuOut.String())
	fmt.Fprintf(stdout, "work_per_s=%.0f\n", float64(n)/elapsed.Seconds())
	return nil
}
