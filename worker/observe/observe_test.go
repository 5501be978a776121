package observe_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is a migrated schema and a pool on it.
type bundle struct {
	pool *pgxpool.Pool
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{pool: pgtest.Pool(t)}
}

// run starts a worker with short timers until the test ends; stop waits
// for it.
func (b *bundle) run(t *testing.T, cfg worker.Config, handlers worker.Handlers) (stop func()) {
	t.Helper()
	cfg.PollInterval = 20 * time.Millisecond
	cfg.RescueInterval = 100 * time.Millisecond
	cfg.HealthInterval = 100 * time.Millisecond
	cfg.RetryBackoff = func(int) time.Duration { return 0 }
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w := worker.New(b.pool, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, handlers) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFinished polls until no task of the schema is pending or running.
func (b *bundle) waitFinished(t *testing.T) {
	t.Helper()
	b.waitUnfinished(t, "every task finished", "")
}

var errBoom = errors.New("boom")

// handlers: "ok" succeeds, "boom" fails, "nap" snoozes once.
func handlers() worker.Handlers {
	var napped atomic.Bool
	return worker.Handlers{
		"ok":   func(context.Context, *worker.Task) error { return nil },
		"boom": func(context.Context, *worker.Task) error { return errBoom },
		"nap": func(_ context.Context, t *worker.Task) error {
			if !napped.Swap(true) {
				return worker.Snooze(time.Millisecond)
			}
			return nil
		},
	}
}

func enqueue(t *testing.T, c *queue.Client, name string, opts ...queue.Option) int64 {
	t.Helper()
	id, err := c.Enqueue(context.Background(), name, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return id.ID
}

// waitFinishedExcept is waitFinished for every queue but skip.
func (b *bundle) waitFinishedExcept(t *testing.T, skip string) {
	t.Helper()
	b.waitUnfinished(t, "every task outside queue "+skip+" finished", skip)
}

// waitUnfinished polls until no task outside queue skip is pending or
// running.
func (b *bundle) waitUnfinished(t *testing.T, what, skip string) {
	t.Helper()
	pgtest.Eventually(t, 5*time.Second, what, func() bool {
		var n int
		err := b.pool.QueryRow(context.Background(),
			"SELECT count(*) FROM skiplock_tasks WHERE status IN ('pending', 'running') AND queue <> $1", skip).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
