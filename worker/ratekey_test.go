package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// keyedLimit is the per-key limit of TestRateLimitPerKeyAcrossProcesses:
// 3 calls a second per key.
var keyedLimit = worker.RateLimit{Name: "call", Limit: 3, Per: time.Second, PerKey: true}

// TestRateLimitPerKeyAcrossProcesses: three worker processes share a
// per-key limit of 3 a second. Every grant of every window of every key,
// as the database recorded it, stays within 3; no process claims a task it
// was not granted; a key with a backlog does not hold back the keys behind
// it; tasks over the limit wait pending and all complete, each in one
// attempt. The workers poll only every 10 s: the next windows' claims come
// from the loop looking again when a window turns.
func TestRateLimitPerKeyAcrossProcesses(t *testing.T) {
	if os.Getenv("SKIPLOCK_RATEKEY_CHILD") != "" {
		rateKeyChild()
		return
	}
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Every version of every row of skiplock_rate_keys, for the proof.
	if _, err := b.pool.Exec(ctx, `
		CREATE TABLE rate_history (scope text, key text, window_start timestamptz, used integer);
		CREATE FUNCTION rate_history_record() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO rate_history VALUES (NEW.scope, NEW.key, NEW.window_start, NEW.used);
			RETURN NULL;
		END $$;
		CREATE TRIGGER rate_history AFTER INSERT OR UPDATE ON skiplock_rate_keys
			FOR EACH ROW EXECUTE FUNCTION rate_history_record()`); err != nil {
		t.Fatal(err)
	}
	// The hot key's backlog first in claim order, then three keys of 3.
	const hot = 24
	var tasks []queue.NewTask
	for range hot {
		tasks = append(tasks, queue.NewTask{Name: "call", Payload: "hot", Options: []queue.Option{queue.WithLimitKey("hot")}})
	}
	for _, k := range []string{"a", "b", "c"} {
		for range 3 {
			tasks = append(tasks, queue.NewTask{Name: "call", Payload: k, Options: []queue.Option{queue.WithLimitKey(k)}})
		}
	}
	if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}

	cfg := b.pool.Config().ConnConfig
	url := fmt.Sprintf("postgres://%s@%s/%s?search_path=%s", cfg.User, net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), cfg.Database, b.schema)
	for i := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRateLimitPerKeyAcrossProcesses$")
		cmd.Env = append(os.Environ(), "SKIPLOCK_RATEKEY_CHILD=1", "DATABASE_URL="+url, fmt.Sprintf("SKIPLOCK_WORKER_ID=ratekey-%d", i))
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("worker process %d: %v\n%s", i, err, stderr.String())
				}
			case <-time.After(pgtest.Patient(5 * time.Second)):
				_ = cmd.Process.Kill()
				t.Errorf("worker process %d did not stop\n%s", i, stderr.String())
			}
		})
	}

	// The keys behind the backlog run while the hot key still waits: it
	// needs eight windows.
	waitFor(t, 10*time.Second, "the tasks of keys a, b and c", func() bool {
		return b.count(t, "limit_key IN ('a', 'b', 'c') AND status = 'completed'") == 9
	})
	if n := b.count(t, "limit_key = 'hot' AND status = 'pending'"); n == 0 {
		t.Fatal("the hot key's backlog was done before the keys behind it: they waited on it")
	} else {
		t.Logf("keys a, b, c done with %d of the hot key's %d tasks still pending", n, hot)
	}
	waitFor(t, 15*time.Second, "every task", func() bool {
		return b.count(t, "status = 'completed'") == len(tasks)
	})
	if n := b.count(t, "attempt <> 1"); n != 0 {
		t.Fatalf("%d tasks ran more than once or not at all", n)
	}

	// Per key and window: the most any grant left used, and what the
	// window ended with (grants less what was given back).
	rows, err := b.pool.Query(ctx, `
		SELECT key, window_start, max(used), count(*)
		FROM rate_history WHERE scope = 'name:call' GROUP BY key, window_start ORDER BY key, window_start`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	windows := map[string]int{}
	for rows.Next() {
		var key string
		var start time.Time
		var peak, versions int
		if err := rows.Scan(&key, &start, &peak, &versions); err != nil {
			t.Fatal(err)
		}
		windows[key]++
		if peak > keyedLimit.Limit {
			t.Errorf("key %q, window %s: %d granted, limit %d", key, start.Format("15:04:05"), peak, keyedLimit.Limit)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Claims are of granted tasks only: each key's tasks needed as many
	// windows as its grants allow.
	if windows["hot"] < hot/keyedLimit.Limit {
		t.Errorf("the hot key's %d tasks ran in %d windows, at least %d needed at %d per window", hot, windows["hot"], hot/keyedLimit.Limit, keyedLimit.Limit)
	}
	var workers int
	if err := b.pool.QueryRow(ctx, "SELECT count(DISTINCT worker_id) FROM skiplock_tasks").Scan(&workers); err != nil {
		t.Fatal(err)
	}
	t.Logf("windows per key: %v; tasks ran on %d processes", windows, workers)
}

// rateKeyChild is a worker process of TestRateLimitPerKeyAcrossProcesses.
func rateKeyChild() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer pool.Close()
	w := worker.New(pool, worker.Config{
		WorkerID:     os.Getenv("SKIPLOCK_WORKER_ID"),
		Concurrency:  10,
		PollInterval: 10 * time.Second,
		RateLimits:   []worker.RateLimit{keyedLimit},
	})
	err = w.Run(ctx, worker.Handlers{"call": func(context.Context, *worker.Task) error { return nil }})
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Tasks without a limit key share one key, the empty one, under a per-key
// limit, in either mode.
func TestRateLimitPerKeyWithoutKey(t *testing.T) {
	t.Parallel()
	for _, mode := range []worker.Mode{worker.ModeAdvisory, worker.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			for i := range 5 {
				b.enqueue(t, "call", i)
			}
			b.enqueue(t, "call", "k", queue.WithLimitKey("k"))
			b.enqueue(t, "free", nil)
			polls := b.startThreeCounted(t, worker.Config{Mode: mode, RateLimits: []worker.RateLimit{{Name: "call", Limit: 2, Per: time.Hour, PerKey: true}}},
				worker.Handlers{
					"call": func(context.Context, *worker.Task) error { return nil },
					"free": func(context.Context, *worker.Task) error { return nil },
				})
			waitFor(t, 10*time.Second, "the keyed task and the unlimited one", func() bool {
				return b.count(t, "(limit_key = 'k' OR name = 'free') AND status = 'completed'") == 2
			})
			waitClaims(t, 10, polls...)
			done, pending := b.count(t, "limit_key IS NULL AND name = 'call' AND status = 'completed'"), b.count(t, "limit_key IS NULL AND status = 'pending'")
			// Two per hour-long window, or four if the test straddled a boundary.
			if (done != 2 && done != 4) || done+pending != 5 {
				t.Fatalf("tasks without a key: %d completed, %d pending; want 2 (4 across an hour boundary) and the rest pending", done, pending)
			}
		})
	}
}

// A per-key limit on a queue, or without a positive limit, is refused by
// name.
func TestRateLimitPerKeyBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		limit worker.RateLimit
		want  string
	}{
		{worker.RateLimit{Queue: "default", Limit: 2, Per: time.Second, PerKey: true}, "RateLimits[0]: PerKey needs Name"},
		{worker.RateLimit{Name: "call", Per: time.Second, PerKey: true}, "RateLimits[0].Limit must be positive"},
		{worker.RateLimit{Name: "call", Limit: 2, Per: time.Millisecond, PerKey: true}, "RateLimits[0].Per must be at least 1s"},
	} {
		err := worker.New(b.pool, worker.Config{RateLimits: []worker.RateLimit{c.limit}}).
			Run(context.Background(), worker.Handlers{"call": func(context.Context, *worker.Task) error { return nil }})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.limit, err, c.want)
		}
	}
	// A limit key past queue.MaxKeyLength is refused at enqueue, naming it.
	_, err := b.client.Enqueue(context.Background(), "call", nil, queue.WithLimitKey(strings.Repeat("k", queue.MaxKeyLength+1)))
	if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), "limit key") {
		t.Errorf("a limit key of %d bytes: %v", queue.MaxKeyLength+1, err)
	}
}
