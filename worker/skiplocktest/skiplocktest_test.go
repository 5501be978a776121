package skiplocktest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
	"github.com/skiplock/skiplock/worker/skiplocktest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// recorder is a TB that records failures instead of failing, so that the
// tests can prove the assertions fail when they should. Fatalf does not
// stop the goroutine: the helpers return after it.
type recorder struct {
	errors, fatals []string
	cleanups       []func()
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, a...))
}
func (r *recorder) Fatalf(format string, a ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(format, a...))
}
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *recorder) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.cleanups = nil
}

// passes fails t unless the recorder saw no failure.
func (r *recorder) passes(t *testing.T, what string) {
	t.Helper()
	if len(r.errors)+len(r.fatals) > 0 {
		t.Errorf("%s: want a pass, got failures %q %q", what, r.fatals, r.errors)
	}
	r.errors, r.fatals = nil, nil
}

// fails fails t unless the recorder saw exactly one Fatalf whose message
// has every one of parts.
func (r *recorder) fails(t *testing.T, what string, parts ...string) {
	t.Helper()
	defer func() { r.errors, r.fatals = nil, nil }()
	if len(r.fatals) != 1 || len(r.errors) > 0 {
		t.Errorf("%s: want one Fatalf, got fatals %q, errors %q", what, r.fatals, r.errors)
		return
	}
	for _, p := range parts {
		if !strings.Contains(r.fatals[0], p) {
			t.Errorf("%s: failure %q does not say %q", what, r.fatals[0], p)
		}
	}
}

type bundle struct {
	pool *pgxpool.Pool
	q    *queue.Client
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := skiplocktest.Schema(t, pgtest.Server(t).URL)
	return &bundle{pool: pool, q: queue.New(pool)}
}

func TestRequireEnqueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	id, err := b.q.EnqueueTx(ctx, tx, "email.send", map[string]any{"to": "ada@example.com", "tags": []string{"welcome", "new"}, "n": 1},
		queue.WithQueue("mail"), queue.WithPriority(-1), queue.WithMaxAttempts(5), queue.WithTimeout(time.Second),
		queue.WithMetadata([]byte(`{"tenant": "acme"}`)))
	if err != nil {
		t.Fatal(err)
	}

	r := &recorder{}
	got := skiplocktest.RequireEnqueued(r, tx, "email.send", &skiplocktest.Want{
		Payload:  map[string]any{"to": "ada@example.com", "tags": []string{"new"}, "n": 1.0},
		Metadata: map[string]string{"tenant": "acme"},
		Queue:    "mail", Priority: new(-1), MaxAttempts: 5, Timeout: time.Second, Status: queue.StatusPending,
	})
	r.passes(t, "every field matching, in the transaction")
	if got == nil || got.ID != id.ID {
		t.Fatalf("RequireEnqueued returned %+v, want task %d", got, id.ID)
	}
	skiplocktest.RequireEnqueued(r, tx, "email.send", nil)
	r.passes(t, "nil Want")

	// Not committed: the pool does not see it.
	skiplocktest.RequireEnqueued(r, b.pool, "email.send", nil)
	r.fails(t, "uncommitted task through the pool", `no task "email.send" was enqueued`)

	for _, c := range []struct {
		what string
		want skiplocktest.Want
		says []string
	}{
		{"payload value", skiplocktest.Want{Payload: map[string]any{"to": "bob@example.com"}},
			[]string{`no task "email.send" matches`, fmt.Sprintf("task %d: payload", id.ID), `does not contain {"to":"bob@example.com"}`}},
		{"payload key", skiplocktest.Want{Payload: map[string]any{"cc": "x"}}, []string{"does not contain"}},
		{"array element", skiplocktest.Want{Payload: map[string]any{"tags": []string{"vip"}}}, []string{"does not contain"}},
		{"queue", skiplocktest.Want{Queue: "default"}, []string{`queue "mail", want "default"`}},
		{"priority 0", skiplocktest.Want{Priority: new(0)}, []string{"priority -1, want 0"}},
		{"max attempts", skiplocktest.Want{MaxAttempts: 25}, []string{"max attempts 5, want 25"}},
		{"timeout", skiplocktest.Want{Timeout: time.Minute}, []string{"timeout 1s, want 1m0s"}},
		{"status", skiplocktest.Want{Status: queue.StatusCompleted}, []string{"status pending, want completed"}},
		{"metadata", skiplocktest.Want{Metadata: map[string]string{"tenant": "other"}}, []string{"metadata"}},
	} {
		skiplocktest.RequireEnqueued(r, tx, "email.send", &c.want)
		r.fails(t, c.what, c.says...)
	}
	skiplocktest.RequireEnqueued(r, tx, "email.other", nil)
	r.fails(t, "another name", `no task "email.other" was enqueued`)

	// A second matching task makes the one to return ambiguous.
	if _, err := b.q.EnqueueTx(ctx, tx, "email.send", map[string]any{"to": "ada@example.com"}, queue.WithQueue("mail")); err != nil {
		t.Fatal(err)
	}
	skiplocktest.RequireEnqueued(r, tx, "email.send", &skiplocktest.Want{Queue: "mail"})
	r.fails(t, "two matches", `2 tasks "email.send" match`, "RequireManyEnqueued")
	skiplocktest.RequireEnqueued(r, tx, "email.send", &skiplocktest.Want{Priority: new(-1)})
	r.passes(t, "narrowed to one")

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	skiplocktest.RequireEnqueued(r, b.pool, "email.send", &skiplocktest.Want{Priority: new(-1)})
	r.passes(t, "committed, through the pool")
	skiplocktest.RequireEnqueued(t, b.pool, "email.send", &skiplocktest.Want{Priority: new(0)}) // a *testing.T is a TB
}

func TestRequireEnqueuedBadWant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.q.Enqueue(context.Background(), "a", 1); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	skiplocktest.RequireEnqueued(r, b.pool, "a", &skiplocktest.Want{Payload: func() {}})
	r.fails(t, "payload that is not JSON", "Want.Payload")
}

func TestRequireNotEnqueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := &recorder{}

	skiplocktest.RequireNotEnqueued(r, b.pool, "report.build", nil)
	r.passes(t, "empty table")

	id, err := b.q.Enqueue(ctx, "report.build", map[string]string{"month": "2026-11"}, queue.WithQueue("reports"))
	if err != nil {
		t.Fatal(err)
	}
	skiplocktest.RequireNotEnqueued(r, b.pool, "report.build", nil)
	r.fails(t, "any task of the name", `expected no task "report.build"`, fmt.Sprintf("task %d", id.ID))
	skiplocktest.RequireNotEnqueued(r, b.pool, "report.build", &skiplocktest.Want{Payload: map[string]string{"month": "2026-11"}})
	r.fails(t, "matching payload", "found 1")
	skiplocktest.RequireNotEnqueued(r, b.pool, "report.build", &skiplocktest.Want{Payload: map[string]string{"month": "2026-12"}})
	r.passes(t, "another payload")
	skiplocktest.RequireNotEnqueued(r, b.pool, "report.build", &skiplocktest.Want{Payload: map[string]string{"month": "2026-11"}, Queue: "default"})
	r.passes(t, "another queue")
	skiplocktest.RequireNotEnqueued(r, b.pool, "report.other", nil)
	r.passes(t, "another name")
}

func TestRequireManyEnqueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := &recorder{}

	ids, err := b.q.EnqueueMany(ctx, []queue.NewTask{
		{Name: "a", Payload: map[string]int{"n": 1}},
		{Name: "b", Payload: map[string]int{"n": 2}, Options: []queue.Option{queue.WithQueue("q2")}},
		{Name: "a", Payload: map[string]int{"n": 3}},
		{Name: "other", Payload: nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := skiplocktest.RequireManyEnqueued(r, b.pool, []skiplocktest.Expected{
		{Name: "a", Want: skiplocktest.Want{Payload: map[string]int{"n": 1}}},
		{Name: "b", Want: skiplocktest.Want{Queue: "q2"}},
		{Name: "a"},
	})
	r.passes(t, "in order, other names ignored")
	if len(got) != 3 || got[0].ID != ids[0].ID || got[1].ID != ids[1].ID || got[2].ID != ids[2].ID {
		t.Errorf("RequireManyEnqueued returned %v, want tasks %v", got, ids[:3])
	}

	skiplocktest.RequireManyEnqueued(r, b.pool, []skiplocktest.Expected{{Name: "b"}, {Name: "a"}, {Name: "a"}})
	r.fails(t, "wrong order", `#0 (task `+fmt.Sprint(ids[0].ID)+`): name "a", want "b"`, "seen, in order")
	skiplocktest.RequireManyEnqueued(r, b.pool, []skiplocktest.Expected{{Name: "a"}, {Name: "b"}})
	r.fails(t, "one too few expected", `#2 (task `+fmt.Sprint(ids[2].ID)+`): unexpected task "a"`)
	skiplocktest.RequireManyEnqueued(r, b.pool, []skiplocktest.Expected{{Name: "a"}, {Name: "b"}, {Name: "a"}, {Name: "b"}})
	r.fails(t, "one too many expected", `#3: want a task "b", missing`)
	skiplocktest.RequireManyEnqueued(r, b.pool, []skiplocktest.Expected{
		{Name: "a"}, {Name: "b"}, {Name: "a", Want: skiplocktest.Want{Payload: map[string]int{"n": 4}}},
	})
	r.fails(t, "payload of the third", `#2 (task `+fmt.Sprint(ids[2].ID)+`, "a"): payload`)
}

// TestWork runs single tasks through a worker's real path: middleware,
// classification, retry rules and the fenced outcome write.
func TestWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	var wrapped atomic.Int64
	w := worker.New(b.pool, worker.Config{
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryBackoff: func(int) time.Duration { return time.Hour },
		Middleware: []worker.Middleware{func(next worker.Handler) worker.Handler {
			return func(ctx context.Context, t *worker.Task) error {
				wrapped.Add(1)
				return next(ctx, t)
			}
		}},
	})
	handlers := worker.Handlers{
		"ok":        func(context.Context, *worker.Task) error { return nil },
		"flaky":     func(context.Context, *worker.Task) error { return errors.New("mail server busy") },
		"permanent": func(context.Context, *worker.Task) error { return worker.Permanent(errors.New("no such user")) },
		"later":     func(context.Context, *worker.Task) error { return worker.Snooze(time.Hour) },
		"panics":    func(context.Context, *worker.Task) error { panic("boom") },
		"slow": func(ctx context.Context, _ *worker.Task) error {
			<-ctx.Done()
			return ctx.Err()
		},
	}
	enqueue := func(name string, opts ...queue.Option) int64 {
		t.Helper()
		id, err := b.q.Enqueue(ctx, name, nil, append([]queue.Option{queue.WithMaxAttempts(3)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return id.ID
	}

	for _, c := range []struct {
		name     string
		opts     []queue.Option
		outcome  worker.Outcome
		status   queue.Status
		attempt  int
		errorHas string
	}{
		{"ok", nil, worker.OutcomeSuccess, queue.StatusCompleted, 1, ""},
		{"flaky", nil, worker.OutcomeError, queue.StatusRetrying, 1, "mail server busy"},
		{"permanent", nil, worker.OutcomeError, queue.StatusFailed, 1, "no such user"},
		{"later", nil, worker.OutcomeSnoozed, queue.StatusScheduled, 0, ""},
		{"panics", nil, worker.OutcomePanic, queue.StatusRetrying, 1, "panic: boom"},
		{"slow", []queue.Option{queue.WithTimeout(20 * time.Millisecond)}, worker.OutcomeTimeout, queue.StatusRetrying, 1, "timed out after 20ms"},
		{"unknown", nil, worker.OutcomeNoHandler, queue.StatusPending, 0, `no handler for task name "unknown"`},
	} {
		id := enqueue(c.name, c.opts...)
		res := skiplocktest.Work(ctx, t, w, handlers, id)
		if res.Outcome != c.outcome || res.Status != c.status || !strings.Contains(res.Error, c.errorHas) {
			t.Errorf("%s: outcome %q, status %s, error %q; want %q, %s, containing %q", c.name, res.Outcome, res.Status, res.Error, c.outcome, c.status, c.errorHas)
		}
		back := c.status == queue.StatusScheduled || c.status == queue.StatusPending || c.status == queue.StatusRetrying
		if res.Task.ID != id || res.Task.Status != c.status || res.Task.Attempt != c.attempt || res.Task.WorkerID != w.ID() && !back {
			t.Errorf("%s: stored task %+v, want status %s, attempt %d, worker %s", c.name, res.Task, c.status, c.attempt, w.ID())
		}
		if c.status == queue.StatusRetrying && time.Until(res.Task.RunAt) < 50*time.Minute {
			t.Errorf("%s: retry at %s, want in about an hour (RetryBackoff)", c.name, res.Task.RunAt)
		}
	}
	if n := wrapped.Load(); n != 6 {
		t.Errorf("middleware ran %d times, want 6 (every task with a handler)", n)
	}

	// The retried task runs again, at once, as attempt 2, then fails for
	// good at its third.
	flaky := enqueue("flaky")
	skiplocktest.Work(ctx, t, w, handlers, flaky)
	skiplocktest.Work(ctx, t, w, handlers, flaky)
	res := skiplocktest.Work(ctx, t, w, handlers, flaky)
	if res.Status != queue.StatusFailed || res.Task.Attempt != 3 || len(res.Task.Errors) != 3 {
		t.Errorf("third attempt: status %s, attempt %d, %d errors; want failed, 3, 3", res.Status, res.Task.Attempt, len(res.Task.Errors))
	}

	r := &recorder{}
	if got := skiplocktest.Work(ctx, r, w, handlers, flaky); got != nil {
		t.Errorf("Work of a failed task returned %+v", got)
	}
	r.fails(t, "failed task", fmt.Sprintf("working task %d", flaky), "not pending", "failed")
	skiplocktest.Work(ctx, r, w, handlers, 1<<40)
	r.fails(t, "no such task", "not found")
	pending := enqueue("ok")
	skiplocktest.Work(ctx, r, w, nil, pending)
	r.fails(t, "no handlers", "at least one handler")
	skiplocktest.RequireEnqueued(t, b.pool, "ok", &skiplocktest.Want{Status: queue.StatusPending})
}

// TestWorkBesideRunningWorker: a task run by RunTask is guarded by a lease
// that it renews, so the rescuer of a worker running on the same schema
// leaves it alone while it runs, for several times the lease.
func TestWorkBesideRunningWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	id, err := b.q.Enqueue(ctx, "job", nil)
	if err != nil {
		t.Fatal(err)
	}

	other := worker.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RescueInterval: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		WorkerID: "other",
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	w := worker.New(b.pool, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), WorkerID: "test", LeaseDuration: 2 * time.Second})
	res := skiplocktest.Work(ctx, t, w, worker.Handlers{"job": func(context.Context, *worker.Task) error {
		// The other worker starts while the task runs; its rescuer, once
		// elected, looks at the task every 10ms while the lease (2s) is
		// renewed four times, every 667ms: past the first lease's end.
		go func() {
			done <- worker.New(pgtest.PoolFromConfig(t, b.pool.Config()), other).Run(runCtx, worker.Handlers{"job": func(context.Context, *worker.Task) error {
				return nil
			}})
		}()
		pgtest.Eventually(t, time.Second, "the other worker's rescuer elected", func() bool {
			var n int
			err := b.pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted").Scan(&n)
			return err == nil && n > 0
		})
		var leases []time.Time
		pgtest.Eventually(t, 3*time.Second, "four lease renewals", func() bool {
			var until time.Time
			if err := b.pool.QueryRow(ctx, "SELECT locked_until FROM skiplock_tasks WHERE id = $1", id.ID).Scan(&until); err != nil {
				t.Error(err)
				return true
			}
			if len(leases) == 0 || !until.Equal(leases[len(leases)-1]) {
				leases = append(leases, until)
			}
			return len(leases) >= 5
		})
		return nil
	}}, id.ID)
	if res.Status != queue.StatusCompleted || res.Task.WorkerID != "test" || res.Task.Attempt != 1 || len(res.Task.Errors) != 0 {
		t.Errorf("task %+v, want completed by worker test on attempt 1 with no error history", res.Task)
	}
}

func TestSchemaIsolatedAndDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Server(t).URL

	r := &recorder{}
	a := skiplocktest.Schema(r, url)
	b := skiplocktest.Schema(t, url)
	r.passes(t, "Schema")
	if _, err := queue.New(a).Enqueue(ctx, "only.in.a", nil); err != nil {
		t.Fatal(err)
	}
	skiplocktest.RequireEnqueued(t, a, "only.in.a", nil)
	skiplocktest.RequireNotEnqueued(t, b, "only.in.a", nil)

	info, err := ops.Schema(ctx, queue.New(a))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.Name, skiplocktest.SchemaPrefix) {
		t.Errorf("schema %q, want prefix %q", info.Name, skiplocktest.SchemaPrefix)
	}
	r.cleanup()
	r.passes(t, "cleanup")
	var exists bool
	if err := b.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", info.Name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("schema %s still exists after cleanup", info.Name)
	}
}

func TestSchemaNoURL(t *testing.T) {
	t.Setenv("TEST_DATABASE_URL", "")
	t.Setenv("DATABASE_URL", "")
	r := &recorder{}
	if pool := skiplocktest.Schema(r, ""); pool != nil {
		t.Errorf("Schema without a URL returned a pool")
	}
	r.fails(t, "no URL", "TEST_DATABASE_URL or DATABASE_URL")
}

func TestRequireEnqueuedKeysAndRunAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := &recorder{}

	at := time.Now().Add(24 * time.Hour)
	if _, err := b.q.Enqueue(ctx, "at", nil, queue.WithRunAt(at), queue.WithUniqueKey("day:1@x"), queue.WithExclusiveKey("account:7")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.q.Enqueue(ctx, "later", nil, queue.WithDelay(time.Hour), queue.WithUniqueKey("digest:ada"), queue.WithUniqueWindow(time.Hour)); err != nil {
		t.Fatal(err)
	}

	skiplocktest.RequireEnqueued(r, b.pool, "at", &skiplocktest.Want{RunAt: at, UniqueKey: "day:1@x", ExclusiveKey: "account:7"})
	r.passes(t, "exact run time and keys")
	skiplocktest.RequireEnqueued(r, b.pool, "later", &skiplocktest.Want{RunAt: time.Now().Add(time.Hour), RunAtLeeway: time.Minute, UniqueKey: "digest:ada"})
	r.passes(t, "delay within a leeway, windowed unique key without its window")

	skiplocktest.RequireEnqueued(r, b.pool, "at", &skiplocktest.Want{RunAt: at.Add(time.Millisecond)})
	r.fails(t, "run time off by 1ms, no leeway", "run at", "± 0s")
	skiplocktest.RequireEnqueued(r, b.pool, "later", &skiplocktest.Want{RunAt: time.Now(), RunAtLeeway: time.Minute})
	r.fails(t, "run time an hour off", "run at")
	skiplocktest.RequireEnqueued(r, b.pool, "at", &skiplocktest.Want{UniqueKey: "day:2"})
	r.fails(t, "unique key", `unique key "day:1@x", want "day:2"`)
	skiplocktest.RequireEnqueued(r, b.pool, "at", &skiplocktest.Want{ExclusiveKey: "account:8"})
	r.fails(t, "exclusive key", `exclusive key "account:7", want "account:8"`)

	if _, err := b.q.Enqueue(ctx, "seq", nil, queue.WithSequence("ledger:1")); err != nil {
		t.Fatal(err)
	}
	skiplocktest.RequireEnqueued(r, b.pool, "seq", &skiplocktest.Want{SequenceKey: "ledger:1", Status: queue.StatusPending})
	r.passes(t, "sequence key")
	skiplocktest.RequireEnqueued(r, b.pool, "seq", &skiplocktest.Want{SequenceKey: "ledger:2"})
	r.fails(t, "sequence key", `sequence key "ledger:1", want "ledger:2"`)
}

// TestWorkSequence: Work writes the outcome with the worker's own
// statement, so completing a sequence's head releases the next, and a task
// waiting its turn cannot be worked.
func TestWorkSequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	first, err := b.q.Enqueue(ctx, "apply", 1, queue.WithSequence("ledger:7"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.q.Enqueue(ctx, "apply", 2, queue.WithSequence("ledger:7"))
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(b.pool, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	handlers := worker.Handlers{"apply": func(context.Context, *worker.Task) error { return nil }}
	r := &recorder{}
	skiplocktest.Work(ctx, r, w, handlers, second.ID)
	r.fails(t, "a task waiting its turn", "not pending", "waiting")
	skiplocktest.Work(ctx, t, w, handlers, first.ID)
	if res := skiplocktest.Work(ctx, t, w, handlers, second.ID); res.Status != queue.StatusCompleted {
		t.Errorf("the next task: %s, want completed", res.Status)
	}
}

// TestWorkReleasesDependents: Work writes the outcome with the worker's own
// statement, so completing a task releases the tasks that wait for it, and a
// waiting task cannot be worked.
func TestWorkReleasesDependents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	first, err := b.q.Enqueue(ctx, "extract", nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.q.Enqueue(ctx, "load", nil, queue.WithDependsOn(first.ID))
	if err != nil {
		t.Fatal(err)
	}
	skiplocktest.RequireEnqueued(t, b.pool, "load", &skiplocktest.Want{Status: queue.StatusWaiting})

	w := worker.New(b.pool, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	handlers := worker.Handlers{"extract": func(context.Context, *worker.Task) error { return nil }, "load": func(context.Context, *worker.Task) error { return nil }}
	r := &recorder{}
	skiplocktest.Work(ctx, r, w, handlers, second.ID)
	r.fails(t, "a waiting task", "not pending", "waiting")

	skiplocktest.Work(ctx, t, w, handlers, first.ID)
	skiplocktest.RequireEnqueued(t, b.pool, "load", &skiplocktest.Want{Status: queue.StatusPending})
	if res := skiplocktest.Work(ctx, t, w, handlers, second.ID); res.Status != queue.StatusCompleted {
		t.Errorf("released task: %s, want completed", res.Status)
	}
}

// TestWorkCallerCancels: cancelling Work's context cancels the handler's;
// the attempt is an error, retried.
func TestWorkCallerCancels(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, err := b.q.Enqueue(context.Background(), "wait", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := worker.New(b.pool, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), TaskTimeout: -1})
	res := skiplocktest.Work(ctx, t, w, worker.Handlers{"wait": func(hctx context.Context, _ *worker.Task) error {
		cancel()
		<-hctx.Done()
		return hctx.Err()
	}}, id.ID)
	if res.Outcome != worker.OutcomeError || res.Status != queue.StatusRetrying || res.Task.Attempt != 1 || !strings.Contains(res.Error, "context canceled") {
		t.Errorf("outcome %q, status %s, attempt %d, error %q; want error, retrying, 1, context canceled", res.Outcome, res.Status, res.Task.Attempt, res.Error)
	}
}
