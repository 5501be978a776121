package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TestUnhandledNameWaitsForItsHandler: a task whose name the running
// worker has no handler for stays pending, attempt 0 and no history, while
// the worker runs the names it handles; the worker says so once in its
// log; the stats list it as waiting for a handler; and a worker with its
// (bulk) handler, started later, runs it. In both modes.
func TestUnhandledNameWaitsForItsHandler(t *testing.T) {
	t.Parallel()
	for _, mode := range []worker.Mode{worker.ModeAdvisory, worker.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			waiting := b.enqueue(t, "later", nil)
			known := b.enqueue(t, "known", nil)
			logs := &syncBuffer{}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("the first worker's log:\n%s", logs.String())
				}
			})
			counted := &claims{}
			a, _ := start(t, pgtest.NewPool(t, b.schema), worker.Config{
				Mode: mode, Observer: counted,
				Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
			}, worker.Handlers{"known": func(context.Context, *worker.Task) error { return nil }})
			waitFor(t, 5*time.Second, "the known task completed", func() bool { return b.get(t, known).Status == queue.StatusCompleted })
			// Many claims go by (polls every 50ms), and none takes it.
			waitClaims(t, 20, counted)
			if task := b.get(t, waiting); task.Status != queue.StatusPending || task.Attempt != 0 || len(task.Errors) != 0 || task.WorkerID != "" {
				t.Fatalf("the task without a handler: %+v; want pending, attempt 0, no history", task)
			}
			const said = "have names it has no handler for"
			waitFor(t, 5*time.Second, "the worker's log line", func() bool { return logs.count(said) > 0 })
			if n := logs.count(said); n != 1 || !strings.Contains(logs.String(), "default: later") {
				t.Errorf("the worker logged %d lines about names it lacks, want 1 naming default: later", n)
			}

			var names []string
			if err := b.pool.QueryRow(ctx, "SELECT names FROM skiplock_workers WHERE id = $1", a.ID()).Scan(&names); err != nil {
				t.Fatal(err)
			}
			if strings.Join(names, ",") != "known" {
				t.Errorf("skiplock_workers.names = %v, want [known]", names)
			}
			un, err := ops.Unhandled(ctx, b.client)
			if err != nil {
				t.Fatal(err)
			}
			created := b.get(t, waiting).CreatedAt
			if len(un) != 1 || un[0].Queue != queue.DefaultQueue || un[0].Name != "later" || un[0].Tasks != 1 || !un[0].OldestCreatedAt.Equal(created) {
				t.Errorf("Unhandled = %+v, want one task of later in %s, created %s", un, queue.DefaultQueue, created)
			}

			// A bulk handler: its name is claimed like any other.
			start(t, pgtest.NewPool(t, b.schema), worker.Config{Mode: mode}, worker.Handlers{"later": worker.BulkHandler{
				Handle:  func(context.Context, []*worker.Task) []error { return nil },
				MaxWait: time.Millisecond,
			}.Handler()})
			waitFor(t, 5*time.Second, "the task completed by the worker that handles it", func() bool {
				return b.get(t, waiting).Status == queue.StatusCompleted
			})
			if task := b.get(t, waiting); task.Attempt != 1 || len(task.Errors) != 0 {
				t.Errorf("the task ran as %+v, want attempt 1 and no history", task)
			}
			if un, err := ops.Unhandled(ctx, b.client); err != nil || len(un) != 0 {
				t.Errorf("Unhandled after it ran = %+v, %v; want none", un, err)
			}
		})
	}
}

// TestUnhandledWorkerWithoutNames: a worker row without names (a worker
// built before skiplock recorded them) counts as handling every name of
// its queues; a gone worker handles nothing.
func TestUnhandledWorkerWithoutNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.enqueue(t, "x", nil)
	b.enqueue(t, "y", nil, queue.WithQueue("other"))
	if _, err := b.pool.Exec(ctx, `INSERT INTO skiplock_workers (id, host, pid, queues, heartbeat_at) VALUES
		('old', 'h', 1, '{default}', now()),
		('gone', 'h', 2, '{other}', now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	un, err := ops.Unhandled(ctx, b.client)
	if err != nil {
		t.Fatal(err)
	}
	if len(un) != 1 || un[0].Queue != "other" || un[0].Name != "y" || un[0].Tasks != 1 {
		t.Fatalf("Unhandled = %+v, want only y in other", un)
	}
}

// TestMixedFleetAcrossProcesses: two worker processes (this test binary,
// run again) with disjoint handlers share one queue, started while both
// names wait at its head. Each runs only its own names, none fails, and
// each task runs once.
func TestMixedFleetAcrossProcesses(t *testing.T) {
	if name := os.Getenv("SKIPLOCK_FLEET_CHILD"); name != "" {
		fleetChild(name)
		return
	}
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const each = 300
	tasks := make([]queue.NewTask, 0, 2*each)
	for i := range each {
		tasks = append(tasks, queue.NewTask{Name: "fleet.a", Payload: i}, queue.NewTask{Name: "fleet.b", Payload: i})
	}
	if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	cfg := b.pool.Config().ConnConfig
	url := fmt.Sprintf("postgres://%s@%s/%s?search_path=%s", cfg.User, net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), cfg.Database, b.schema)
	for _, name := range []string{"fleet.a", "fleet.b"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMixedFleetAcrossProcesses$")
		cmd.Env = append(os.Environ(), "SKIPLOCK_FLEET_CHILD="+name, "DATABASE_URL="+url)
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			if t.Failed() {
				t.Logf("child %s:\n%s", name, stderr.String())
			}
		})
	}
	waitFor(t, 20*time.Second, "every task finished", func() bool {
		return b.count(t, "status IN ('pending', 'running')") == 0
	})
	if n := b.count(t, "status <> 'completed'"); n != 0 {
		t.Errorf("%d tasks did not complete", n)
	}
	if n := b.count(t, "name || '-worker' <> worker_id"); n != 0 {
		t.Errorf("%d tasks ran in the process without their handler", n)
	}
	if n := b.count(t, "attempt <> 1 OR errors <> '[]'::jsonb"); n != 0 {
		t.Errorf("%d tasks ran more than once or recorded an error", n)
	}
}

// fleetChild runs a worker with a handler for name only until killed.
func fleetChild(name string) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := worker.New(pool, worker.Config{WorkerID: name + "-worker", Concurrency: 8, PollInterval: 50 * time.Millisecond})
	err = w.Run(ctx, worker.Handlers{name: func(context.Context, *worker.Task) error { return nil }})
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// TestUnhandledPileAhead: 5,000 tasks of a name the worker has no handler
// for, ahead of 100 that it handles in claim order, hold none of the 100
// back: all run, and the 5,000 stay pending with no attempt spent. Then
// more handled tasks, enqueued behind the pile one at a time, run too:
// claims that find nothing but the pile carry their cursor past it.
func TestUnhandledPileAhead(t *testing.T) {
	t.Parallel()
	for _, mode := range []worker.Mode{worker.ModeAdvisory, worker.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			pile := make([]queue.NewTask, 5000)
			for i := range pile {
				pile[i] = queue.NewTask{Name: "pile"}
			}
			if _, err := b.client.EnqueueMany(ctx, pile); err != nil {
				t.Fatal(err)
			}
			work := make([]queue.NewTask, 100)
			for i := range work {
				work[i] = queue.NewTask{Name: "work"}
			}
			if _, err := b.client.EnqueueMany(ctx, work); err != nil {
				t.Fatal(err)
			}
			counted := &claims{}
			start(t, b.pool, worker.Config{Mode: mode, Concurrency: 10, Observer: counted},
				worker.Handlers{"work": func(context.Context, *worker.Task) error { return nil }})
			waitFor(t, 10*time.Second, "the 100 handled tasks completed", func() bool {
				return b.count(t, "name = 'work' AND status = 'completed'") == 100
			})
			// Idle claims go by; then tasks that arrive behind the pile.
			waitClaims(t, 20, counted)
			for i := range 5 {
				id := b.enqueue(t, "work", i)
				waitFor(t, 5*time.Second, "a handled task behind the pile completed", func() bool {
					return b.get(t, id).Status == queue.StatusCompleted
				})
			}
			if n := b.count(t, "name = 'pile' AND status = 'pending' AND attempt = 0 AND errors = '[]'::jsonb"); n != 5000 {
				t.Errorf("%d of the 5,000 unhandled tasks are pending and unattempted", n)
			}
		})
	}
}

// TestRateLimitOnUnhandledName: a rate limit on a name the worker has no
// handler for takes nothing, and the names it handles (rate-limited or
// not) run.
func TestRateLimitOnUnhandledName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	limited := b.enqueue(t, "limited", nil)
	other := b.enqueue(t, "other", nil)
	plain := b.enqueue(t, "plain", nil)
	counted := &claims{}
	start(t, b.pool, worker.Config{Observer: counted, RateLimits: []worker.RateLimit{
		{Name: "limited", Limit: 100, Per: time.Second},
		{Name: "other", Limit: 100, Per: time.Second, PerKey: true},
	}}, worker.Handlers{
		"limited": func(context.Context, *worker.Task) error { return nil },
		"plain":   func(context.Context, *worker.Task) error { return nil },
	})
	waitFor(t, 5*time.Second, "the handled tasks completed", func() bool {
		return b.get(t, limited).Status == queue.StatusCompleted && b.get(t, plain).Status == queue.StatusCompleted
	})
	waitClaims(t, 10, counted)
	if task := b.get(t, other); task.Status != queue.StatusPending || task.Attempt != 0 {
		t.Errorf("the rate-limited task without a handler: %+v; want pending, attempt 0", task)
	}
}

// TestPeriodicWithoutItsHandler: a worker's periodic task whose name it has
// no handler for is still enqueued by its scheduler, and waits, pending,
// for a worker that handles it, which runs it.
func TestPeriodicWithoutItsHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	counted := &claims{}
	start(t, b.pool, worker.Config{Observer: counted, Periodic: []worker.PeriodicTask{{Every: time.Second, Task: "tick"}}},
		worker.Handlers{"other": func(context.Context, *worker.Task) error { return nil }})
	waitFor(t, 5*time.Second, "a tick enqueued", func() bool { return b.count(t, "name = 'tick'") > 0 })
	waitClaims(t, 10, counted)
	if n := b.count(t, "name = 'tick' AND (status <> 'pending' OR attempt <> 0)"); n != 0 {
		t.Fatalf("%d ticks were claimed by the worker without their handler", n)
	}
	start(t, pgtest.NewPool(t, b.schema), worker.Config{}, worker.Handlers{"tick": func(context.Context, *worker.Task) error { return nil }})
	waitFor(t, 5*time.Second, "a tick completed by the worker that handles it", func() bool {
		return b.count(t, "name = 'tick' AND status = 'completed'") > 0
	})
	if n := b.count(t, "status = 'failed'"); n != 0 {
		t.Errorf("%d tasks failed", n)
	}
}

// TestUnhandledPileOnly: a queue whose due tasks are all of a name the
// worker does not handle (20,000 of them) holds back none of the handled
// tasks enqueued behind them one at a time. Whether the claims carried
// their cursor past the pile (an expensive claim from the head that took
// nothing) depends on the machine's speed, so it is logged, not asserted.
func TestUnhandledPileOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pile := make([]queue.NewTask, 20000)
	for i := range pile {
		pile[i] = queue.NewTask{Name: "pile"}
	}
	if _, err := b.client.EnqueueMany(ctx, pile); err != nil {
		t.Fatal(err)
	}
	counted := &claims{}
	w, _ := start(t, b.pool, worker.Config{Observer: counted},
		worker.Handlers{"work": func(context.Context, *worker.Task) error { return nil }})
	waitClaims(t, 20, counted)
	t.Logf("after 20 claims of the pile alone, cursor carried past it: %v", worker.CursorCarried(w, queue.DefaultQueue))
	for i := range 5 {
		id := b.enqueue(t, "work", i)
		waitFor(t, 5*time.Second, "a handled task behind the pile completed", func() bool {
			return b.get(t, id).Status == queue.StatusCompleted
		})
	}
	if n := b.count(t, "name = 'pile' AND status = 'pending' AND attempt = 0"); n != 20000 {
		t.Errorf("%d of the 20,000 unhandled tasks are pending and unattempted", n)
	}
}

// TestUnhandledUnderConcurrencyLimits: under each claim statement that a
// concurrency limit selects (a queue limit far above what runs: the queue's
// claim and the claim within a held block; a name limit: the claim of
// every limit), in both modes, a task whose name the worker has no
// handler for stays pending and unattempted while its handled neighbours
// run.
func TestUnhandledUnderConcurrencyLimits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		limit queue.Limit
	}{
		{"queue limit", queue.Limit{Queue: queue.DefaultQueue, Max: 1000}},
		{"name limit", queue.Limit{Name: "known", Max: 1000}},
	} {
		for _, mode := range []worker.Mode{worker.ModeAdvisory, worker.ModeLease} {
			t.Run(c.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ctx := context.Background()
				if err := b.client.SetLimit(ctx, c.limit); err != nil {
					t.Fatal(err)
				}
				tasks := make([]queue.NewTask, 0, 200)
				for range 100 {
					tasks = append(tasks, queue.NewTask{Name: "unknown"}, queue.NewTask{Name: "known"})
				}
				if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
					t.Fatal(err)
				}
				counted := &claims{}
				w, _ := start(t, b.pool, worker.Config{Mode: mode, Concurrency: 20, Observer: counted},
					worker.Handlers{"known": func(context.Context, *worker.Task) error { return nil }})
				waitFor(t, 10*time.Second, "the handled tasks completed", func() bool {
					return b.count(t, "name = 'known' AND status = 'completed'") == 100
				})
				waitClaims(t, 10, counted)
				byQueue, held, limited := worker.QueueClaimed(w)
				t.Logf("taken by the queue's claim %d (within a held block %d), by the claim of every limit %d", byQueue, held, limited)
				if queueClaim := mode == worker.ModeAdvisory && c.limit.Queue != ""; queueClaim && byQueue == 0 || !queueClaim && limited == 0 {
					t.Errorf("the tasks were not taken by the claim the limit selects")
				}
				if n := b.count(t, "name = 'unknown' AND status = 'pending' AND attempt = 0"); n != 100 {
					t.Errorf("%d of the 100 tasks without a handler are pending and unattempted", n)
				}
			})
		}
	}
}
