// The shared setup of the worker package's tests: a migrated schema per
// test, workers started and stopped with it, and small readers of its
// tables.

package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// bundle is what a test works with: a migrated schema, a pool on it and a
// producer.
type bundle struct {
	schema string
	pool   *pgxpool.Pool
	client *queue.Client
}

func setup(t *testing.T) *bundle {
	t.Helper()
	schema := pgtest.Schema(t, true)
	pool := pgtest.NewPool(t, schema)
	return &bundle{schema: schema, pool: pool, client: queue.New(pool)}
}

// testConfig is a Config with timers short enough for tests.
func testConfig(cfg worker.Config) worker.Config {
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.RescueInterval == 0 {
		cfg.RescueInterval = 100 * time.Millisecond
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = 100 * time.Millisecond
	}
	if cfg.RetryBackoff == nil {
		cfg.RetryBackoff = func(int) time.Duration { return 0 }
	}
	if cfg.Logger == nil {
		level := slog.LevelError
		if os.Getenv("SKIPLOCK_TEST_LOG") != "" {
			level = slog.LevelDebug
		}
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	return cfg
}

// start runs a worker on pool until the test ends (or stop is called) and
// checks that Run returns nil.
func start(t *testing.T, pool *pgxpool.Pool, cfg worker.Config, handlers worker.Handlers) (w *worker.Worker, stop func()) {
	t.Helper()
	w = worker.New(pool, testConfig(cfg))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, handlers) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(pgtest.Patient(60 * time.Second)):
				t.Errorf("Run did not return within 60s of cancellation")
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

// waitFor is pgtest.Eventually: expect is how long cond takes to hold on
// an idle machine.
func waitFor(t *testing.T, expect time.Duration, what string, cond func() bool) {
	t.Helper()
	pgtest.Eventually(t, expect, what, cond)
}

// claims counts a worker's claim queries (as its Observer): the signal
// that its claim loop has gone round, for checks that something did not
// happen.
type claims struct {
	worker.NopObserver
	n atomic.Int64
}

func (c *claims) Claimed(string, int, int) { c.n.Add(1) }

// waitClaims waits until each worker has made n more claim queries than
// when it was called.
func waitClaims(t *testing.T, n int64, cs ...*claims) {
	t.Helper()
	from := make([]int64, len(cs))
	for i, c := range cs {
		from[i] = c.n.Load()
	}
	for i, c := range cs {
		waitFor(t, time.Duration(n)*100*time.Millisecond, fmt.Sprintf("%d more claims of worker %d", n, i), func() bool {
			return c.n.Load() >= from[i]+n
		})
	}
}

func (b *bundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock_tasks WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// taskLocks counts the task advisory locks held on the server for this
// schema's table.
func (b *bundle) taskLocks(t *testing.T) int {
	t.Helper()
	var n int
	err := b.pool.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 2
		  AND classid = 'skiplock_tasks'::regclass::oid`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bundle) enqueue(t *testing.T, name string, payload any, opts ...queue.Option) int64 {
	t.Helper()
	id, err := b.client.Enqueue(context.Background(), name, payload, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return id.ID
}

func (b *bundle) get(t *testing.T, id int64) *queue.Task {
	t.Helper()
	task, err := b.client.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// atOnce counts the calls of a handler in flight, and the most at once
// (peak).
type atOnce struct{ running, peak atomic.Int32 }

// enter counts a call in; the func it returns counts it out.
func (a *atOnce) enter() (leave func()) {
	n := a.running.Add(1)
	for p := a.peak.Load(); n > p && !a.peak.CompareAndSwap(p, n); p = a.peak.Load() {
	}
	return func() { a.running.Add(-1) }
}
