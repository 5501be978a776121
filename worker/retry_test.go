package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
	"github.com/skiplock/skiplock/worker/skiplocktest"
)

// TestRetryPolicyPerName: a name's policy sets its backoff and caps its
// attempts below the task's own; other names keep RetryBackoff.
func TestRetryPolicyPerName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := worker.New(b.pool, testConfig(worker.Config{
		RetryBackoff: func(int) time.Duration { return time.Hour },
		Retry: map[string]worker.RetryPolicy{
			"capped": {MaxAttempts: 2, Backoff: func(attempt int) time.Duration { return time.Duration(attempt) * 3 * time.Hour }},
			"slow":   {Backoff: func(int) time.Duration { return 5 * time.Hour }},
		},
	}))
	fail := func(context.Context, *worker.Task) error { return errors.New("down") }
	handlers := worker.Handlers{"capped": fail, "slow": fail, "plain": fail}

	for _, c := range []struct {
		name  string
		retry time.Duration
	}{{"capped", 3 * time.Hour}, {"slow", 5 * time.Hour}, {"plain", time.Hour}} {
		id := b.enqueue(t, c.name, nil, queue.WithMaxAttempts(10))
		res := skiplocktest.Work(ctx, t, w, handlers, id)
		if wait := time.Until(res.Task.RunAt); res.Status != queue.StatusRetrying || wait < c.retry-10*time.Minute || wait > c.retry+10*time.Minute {
			t.Errorf("%s: %s, retry in %s; want retrying, retry in about %s", c.name, res.Status, wait.Round(time.Minute), c.retry)
		}
		if c.name != "capped" {
			continue
		}
		res = skiplocktest.Work(ctx, t, w, handlers, id)
		if res.Status != queue.StatusFailed || res.Task.Attempt != 2 || !res.Task.FailedPermanently() ||
			!strings.Contains(res.Error, "down (not retried: the worker's retry policy for capped allows 2 attempts)") {
			t.Errorf("capped, attempt 2: %s after %d of %d attempts (permanent %v), error %q; want failed by the policy",
				res.Status, res.Task.Attempt, res.Task.MaxAttempts, res.Task.FailedPermanently(), res.Error)
		}
	}

	if err := worker.New(b.pool, worker.Config{Retry: map[string]worker.RetryPolicy{"x": {MaxAttempts: -1}}}).Run(ctx, handlers); err == nil ||
		!strings.Contains(err.Error(), `Retry["x"].MaxAttempts must not be negative`) {
		t.Errorf("Run with a negative policy: %v", err)
	}
}

var (
	errRateLimited = errors.New("rate limited")
	errGone        = errors.New("account gone")
	errFatal       = errors.New("bad request")
)

// TestOnErrorOnPanicDecide: the hooks turn failures into a retry, a
// permanent failure, a cancellation, a snooze or a success, and see
// neither successes nor the handler's own decisions.
func TestOnErrorOnPanicDecide(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	var mu sync.Mutex
	var seen []string // name: outcome as the hook saw it
	w := worker.New(b.pool, testConfig(worker.Config{
		RetryBackoff: func(int) time.Duration { return time.Hour },
		OnError: func(ctx context.Context, t *worker.Task, err error) error {
			mu.Lock()
			seen = append(seen, t.Name+": "+string(worker.OutcomeOf(ctx, err)))
			mu.Unlock()
			switch {
			case errors.Is(err, errRateLimited):
				return worker.Snooze(2 * time.Hour)
			case errors.Is(err, errGone):
				return worker.Cancel(err)
			case errors.Is(err, errFatal):
				return worker.Permanent(err)
			case t.Name == "ignored":
				return nil
			}
			return err
		},
		OnPanic: func(ctx context.Context, t *worker.Task, p *worker.PanicError) error {
			mu.Lock()
			seen = append(seen, t.Name+": panic "+fmt.Sprint(p.Value))
			mu.Unlock()
			switch t.Name {
			case "panic.cancel":
				return worker.Cancel(p)
			case "panic.permanent":
				return worker.Permanent(p)
			}
			return p
		},
	}))
	returns := func(err error) worker.Handler { return func(context.Context, *worker.Task) error { return err } }
	panics := func(context.Context, *worker.Task) error { panic("boom") }
	handlers := worker.Handlers{
		"limited": returns(fmt.Errorf("calling the API: %w", errRateLimited)),
		"gone":    returns(errGone),
		"fatal":   returns(errFatal),
		"flaky":   returns(errors.New("flaky")),
		"ignored": returns(errors.New("nothing to do")),
		"ok":      returns(nil),
		"snoozes": returns(worker.Snooze(time.Minute)),
		"cancels": returns(worker.Cancel(nil)),
		"slow": func(ctx context.Context, _ *worker.Task) error {
			<-ctx.Done()
			return ctx.Err()
		},
		"panic.cancel":    panics,
		"panic.permanent": panics,
		"panic.default":   panics,
	}

	for _, c := range []struct {
		name     string
		outcome  worker.Outcome
		status   queue.Status
		attempt  int
		errorHas string
		hookSaw  string
	}{
		{"limited", worker.OutcomeSnoozed, queue.StatusScheduled, 0, "", "limited: error"},
		{"gone", worker.OutcomeCancelled, queue.StatusCancelled, 1, "account gone", "gone: error"},
		{"fatal", worker.OutcomeError, queue.StatusFailed, 1, "bad request", "fatal: error"},
		{"flaky", worker.OutcomeError, queue.StatusRetrying, 1, "flaky", "flaky: error"},
		{"ignored", worker.OutcomeSuccess, queue.StatusCompleted, 1, "", "ignored: error"},
		{"ok", worker.OutcomeSuccess, queue.StatusCompleted, 1, "", ""},
		{"snoozes", worker.OutcomeSnoozed, queue.StatusScheduled, 0, "", ""},
		{"cancels", worker.OutcomeCancelled, queue.StatusCancelled, 1, "cancelled by its handler", ""},
		{"slow", worker.OutcomeTimeout, queue.StatusRetrying, 1, "timed out", "slow: timeout"},
		{"panic.cancel", worker.OutcomeCancelled, queue.StatusCancelled, 1, "panic: boom", "panic.cancel: panic boom"},
		{"panic.permanent", worker.OutcomePanic, queue.StatusFailed, 1, "panic: boom", "panic.permanent: panic boom"},
		{"panic.default", worker.OutcomePanic, queue.StatusRetrying, 1, "panic: boom", "panic.default: panic boom"},
	} {
		mu.Lock()
		seen = nil
		mu.Unlock()
		id := b.enqueue(t, c.name, nil, queue.WithMaxAttempts(5), queue.WithTimeout(50*time.Millisecond))
		res := skiplocktest.Work(ctx, t, w, handlers, id)
		if res.Outcome != c.outcome || res.Status != c.status || res.Task.Attempt != c.attempt || !strings.Contains(res.Error, c.errorHas) {
			t.Errorf("%s: outcome %q, status %s, attempt %d, error %q; want %q, %s, %d, containing %q",
				c.name, res.Outcome, res.Status, res.Task.Attempt, firstLine(res.Error), c.outcome, c.status, c.attempt, c.errorHas)
		}
		mu.Lock()
		if want := []string{c.hookSaw}; (c.hookSaw == "" && len(seen) != 0) || (c.hookSaw != "" && (len(seen) != 1 || seen[0] != want[0])) {
			t.Errorf("%s: hooks saw %q, want %q", c.name, seen, c.hookSaw)
		}
		mu.Unlock()
		if c.name == "limited" && time.Until(res.Task.RunAt) < 100*time.Minute {
			t.Errorf("limited: runs again at %s, want in about 2h (the hook's snooze)", res.Task.RunAt)
		}
		if c.status == queue.StatusFailed && !res.Task.FailedPermanently() {
			t.Errorf("%s: failed, but not permanently, after %d of %d attempts", c.name, res.Task.Attempt, res.Task.MaxAttempts)
		}
	}
}

// TestOnErrorAcrossWorkers: two workers, each on its own pool, apply their
// hooks to every failing task they claim.
func TestOnErrorAcrossWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var decided atomic.Int64
	cfg := worker.Config{OnError: func(_ context.Context, _ *worker.Task, err error) error {
		decided.Add(1)
		return worker.Cancel(err)
	}}
	h := worker.Handlers{"sync": func(context.Context, *worker.Task) error { return errGone }}
	start(t, pgtest.NewPool(t, b.schema), cfg, h)
	start(t, pgtest.NewPool(t, b.schema), cfg, h)
	const n = 50
	tasks := make([]queue.NewTask, n)
	for i := range tasks {
		tasks[i] = queue.NewTask{Name: "sync", Payload: i}
	}
	if _, err := b.client.EnqueueMany(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "every task cancelled", func() bool { return b.count(t, "status = 'cancelled'") == n })
	if got := b.count(t, "status = 'cancelled' AND attempt = 1 AND errors->0->>'outcome' = 'cancelled' AND errors->0->>'error' = 'account gone'"); got != n || decided.Load() != n {
		t.Errorf("%d tasks cancelled on their first attempt with the error, %d decisions; want %d", got, decided.Load(), n)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// report is a typed task, retried as any task of its name.
type report struct {
	Mode string `json:"mode"`
}

func (report) TaskName() string { return "report.build" }

// TestRetryDelays: the delay of a retry comes from RetryAfter (the
// handler's or a hook's), else the name's policy, else RetryBackoff;
// errors, timeouts and panics alike.
func TestRetryDelays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := worker.New(b.pool, testConfig(worker.Config{
		RetryBackoff: func(int) time.Duration { return time.Hour },
		Retry:        map[string]worker.RetryPolicy{"report.build": {Backoff: func(int) time.Duration { return 7 * time.Hour }}},
		OnError: func(_ context.Context, t *worker.Task, err error) error {
			if t.Name == "hooked" {
				return worker.RetryAfter(3*time.Hour, err)
			}
			return err
		},
		OnPanic: func(_ context.Context, t *worker.Task, p *worker.PanicError) error {
			if t.Name == "hooked.panic" {
				return worker.RetryAfter(4*time.Hour, p)
			}
			return p
		},
	}))
	handlers := worker.Handlers{
		"hooked":       func(context.Context, *worker.Task) error { return errors.New("down") },
		"hooked.panic": func(context.Context, *worker.Task) error { panic("boom") },
		"plain":        func(context.Context, *worker.Task) error { return errors.New("down") },
	}
	worker.Handle(handlers, func(ctx context.Context, t *worker.TaskOf[report]) error {
		switch t.Args.Mode {
		case "own":
			return worker.RetryAfter(5*time.Minute, errors.New("busy"))
		case "timeout":
			<-ctx.Done()
			return ctx.Err()
		case "panic":
			panic("boom")
		case "permanent":
			return worker.Permanent(errors.New("bad input"))
		}
		return errors.New("down")
	})

	for _, c := range []struct {
		what   string
		enq    func() (queue.EnqueueResult, error)
		status queue.Status
		retry  time.Duration
	}{
		{"typed, the name's policy", func() (queue.EnqueueResult, error) { return b.client.EnqueueArgs(ctx, report{Mode: "fail"}) }, queue.StatusRetrying, 7 * time.Hour},
		{"handler's RetryAfter", func() (queue.EnqueueResult, error) { return b.client.EnqueueArgs(ctx, report{Mode: "own"}) }, queue.StatusRetrying, 5 * time.Minute},
		{"timeout, the name's policy", func() (queue.EnqueueResult, error) {
			return b.client.EnqueueArgs(ctx, report{Mode: "timeout"}, queue.WithTimeout(20*time.Millisecond))
		}, queue.StatusRetrying, 7 * time.Hour},
		{"panic, the name's policy", func() (queue.EnqueueResult, error) { return b.client.EnqueueArgs(ctx, report{Mode: "panic"}) }, queue.StatusRetrying, 7 * time.Hour},
		{"permanent", func() (queue.EnqueueResult, error) { return b.client.EnqueueArgs(ctx, report{Mode: "permanent"}) }, queue.StatusFailed, 0},
		{"hook's RetryAfter", func() (queue.EnqueueResult, error) { return b.client.Enqueue(ctx, "hooked", nil) }, queue.StatusRetrying, 3 * time.Hour},
		{"panic, OnPanic's RetryAfter", func() (queue.EnqueueResult, error) { return b.client.Enqueue(ctx, "hooked.panic", nil) }, queue.StatusRetrying, 4 * time.Hour},
		{"no policy, RetryBackoff", func() (queue.EnqueueResult, error) { return b.client.Enqueue(ctx, "plain", nil) }, queue.StatusRetrying, time.Hour},
	} {
		enq, err := c.enq()
		if err != nil {
			t.Fatal(err)
		}
		res := skiplocktest.Work(ctx, t, w, handlers, enq.ID)
		if res.Status != c.status {
			t.Errorf("%s: %s (%s), want %s", c.what, res.Status, firstLine(res.Error), c.status)
			continue
		}
		if wait := time.Until(res.Task.RunAt); c.retry > 0 && (wait < c.retry-2*time.Minute || wait > c.retry+2*time.Minute) {
			t.Errorf("%s: retry in %s, want %s", c.what, wait.Round(time.Second), c.retry)
		}
	}
}
