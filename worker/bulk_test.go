package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// bulkLog records the groups a bulk handler ran.
type bulkLog struct {
	mu     sync.Mutex
	groups [][]int64
}

func (l *bulkLog) add(tasks []*worker.Task) {
	ids := make([]int64, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	l.mu.Lock()
	l.groups = append(l.groups, ids)
	l.mu.Unlock()
}

func (l *bulkLog) sizes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for _, b := range l.groups {
		out = append(out, len(b))
	}
	return out
}

// enqueueMany enqueues n tasks of name, payload {"n": i}, in one statement:
// a worker started after it claims them together.
func (b *bundle) enqueueMany(t *testing.T, name string, n int, opts ...queue.Option) []int64 {
	t.Helper()
	tasks := make([]queue.NewTask, n)
	for i := range tasks {
		tasks[i] = queue.NewTask{Name: name, Payload: map[string]any{"n": i}, Options: opts}
	}
	res, err := b.client.EnqueueMany(context.Background(), tasks)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// TestBulkFillsToMaxSize: a backlog is run in groups of MaxSize, each
// task completed once.
func TestBulkFillsToMaxSize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueueMany(t, "bulk", 12)
	var log bulkLog
	start(t, b.pool, worker.Config{}, worker.Handlers{"bulk": worker.BulkHandler{
		MaxSize: 4, MaxWait: time.Hour,
		Handle: func(ctx context.Context, tasks []*worker.Task) []error {
			log.add(tasks)
			return nil
		},
	}.Handler()})
	waitFor(t, 5*time.Second, "12 tasks completed", func() bool { return b.count(t, "status = 'completed' AND attempt = 1") == 12 })
	if got := log.sizes(); !slices.Equal(got, []int{4, 4, 4}) {
		t.Fatalf("group sizes %v, want [4 4 4]", got)
	}
}

// TestBulkPartialAfterMaxWait: a group that cannot fill runs MaxWait
// after its first task came, with the tasks it has.
func TestBulkPartialAfterMaxWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueueMany(t, "bulk", 3)
	var log bulkLog
	started := time.Now()
	start(t, b.pool, worker.Config{}, worker.Handlers{"bulk": worker.BulkHandler{
		MaxSize: 100, MaxWait: 300 * time.Millisecond,
		Handle: func(ctx context.Context, tasks []*worker.Task) []error {
			log.add(tasks)
			return nil
		},
	}.Handler()})
	waitFor(t, 5*time.Second, "3 tasks completed", func() bool { return b.count(t, "status = 'completed'") == 3 })
	if got := log.sizes(); !slices.Equal(got, []int{3}) {
		t.Fatalf("group sizes %v, want [3]", got)
	}
	if waited := time.Since(started); waited < 300*time.Millisecond {
		t.Fatalf("the partial group ran %s after the worker started, before MaxWait", waited)
	}
}

// TestBulkPerTaskOutcomes: each task of a group gets its own outcome:
// completed, retried with its own attempts and history, failed for good.
func TestBulkPerTaskOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueMany(t, "bulk", 6, queue.WithMaxAttempts(3))
	var log bulkLog
	start(t, b.pool, worker.Config{}, worker.Handlers{"bulk": worker.BulkHandler{
		MaxSize: 10, MaxWait: 200 * time.Millisecond,
		Handle: func(ctx context.Context, tasks []*worker.Task) []error {
			log.add(tasks)
			errs := make([]error, len(tasks))
			for i, task := range tasks {
				var p struct{ N int }
				if err := task.Decode(&p); err != nil {
					errs[i] = err
					continue
				}
				switch {
				case p.N == 5:
					errs[i] = worker.Permanent(errors.New("row 5 is invalid"))
				case p.N%2 == 1 && task.Attempt == 1:
					errs[i] = fmt.Errorf("row %d: remote busy", p.N)
				}
			}
			return errs
		},
	}.Handler()})
	waitFor(t, 10*time.Second, "every task finished", func() bool { return b.count(t, "status IN ('completed', 'failed')") == 6 })
	for n, id := range ids {
		task := b.get(t, id)
		switch {
		case n == 5:
			if task.Status != queue.StatusFailed || task.Attempt != 1 || len(task.Errors) != 1 || !task.Errors[0].Permanent ||
				task.Errors[0].Error != "row 5 is invalid" {
				t.Errorf("task 5: %s attempt %d errors %+v; want failed for good on attempt 1", task.Status, task.Attempt, task.Errors)
			}
		case n%2 == 1:
			if task.Status != queue.StatusCompleted || task.Attempt != 2 || len(task.Errors) != 1 ||
				task.Errors[0].Error != fmt.Sprintf("row %d: remote busy", n) || task.Errors[0].Outcome != "error" {
				t.Errorf("task %d: %s attempt %d errors %+v; want completed on attempt 2 after one error", n, task.Status, task.Attempt, task.Errors)
			}
		default:
			if task.Status != queue.StatusCompleted || task.Attempt != 1 || len(task.Errors) != 0 {
				t.Errorf("task %d: %s attempt %d errors %+v; want completed on attempt 1", n, task.Status, task.Attempt, task.Errors)
			}
		}
	}
	// The first group held all six; the retries ran in a group of their own.
	if got := log.sizes(); len(got) < 2 || got[0] != 6 {
		t.Errorf("group sizes %v, want 6 then the retries", got)
	}
}

// TestBulkPanicAndWrongLength: a panic, or a result slice of the wrong
// length, fails the attempt of every task of the group with an error that
// says so; none is lost, and each is retried on its own attempts.
func TestBulkPanicAndWrongLength(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, want string
		fail       func(tasks []*worker.Task) []error
	}{
		{"panic", "bulk handler of bulk panicked, failing every task of its group of 4: panic: boom",
			func([]*worker.Task) []error { panic("boom") }},
		{"wrong length", "bulk handler of bulk returned 1 results for a group of 4 tasks",
			func([]*worker.Task) []error { return []error{nil} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ids := b.enqueueMany(t, "bulk", 4, queue.WithMaxAttempts(2))
			var panics sync.Map
			start(t, b.pool, worker.Config{
				OnPanic: func(ctx context.Context, task *worker.Task, p *worker.PanicError) error {
					panics.Store(task.ID, p.Value)
					return errors.New("recorded: " + fmt.Sprint(p.Value))
				},
			}, worker.Handlers{"bulk": worker.BulkHandler{
				MaxSize: 4, MaxWait: time.Hour,
				Handle: func(ctx context.Context, tasks []*worker.Task) []error {
					if tasks[0].Attempt == 1 {
						return tc.fail(tasks)
					}
					return nil
				},
			}.Handler()})
			waitFor(t, 10*time.Second, "4 tasks completed", func() bool { return b.count(t, "status = 'completed'") == 4 })
			for _, id := range ids {
				task := b.get(t, id)
				if task.Attempt != 2 || len(task.Errors) != 1 {
					t.Fatalf("task %d: attempt %d, errors %+v; want completed on attempt 2 after one failure", id, task.Attempt, task.Errors)
				}
				e := task.Errors[0]
				if tc.name == "panic" {
					// OnPanic decided, for each task.
					if v, ok := panics.Load(id); !ok || v != "boom" || e.Error != "recorded: boom" {
						t.Errorf("task %d: OnPanic saw %v; history %+v", id, v, e)
					}
					continue
				}
				if e.Outcome != "error" || !strings.Contains(e.Error, tc.want) {
					t.Errorf("task %d: history %+v, want an error containing %q", id, e, tc.want)
				}
			}
		})
	}
	// Without OnPanic, the history holds the panic with its group.
	t.Run("panic history", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.enqueueMany(t, "bulk", 2, queue.WithMaxAttempts(1))
		start(t, b.pool, worker.Config{}, worker.Handlers{"bulk": worker.BulkHandler{
			MaxSize: 2, MaxWait: time.Hour,
			Handle: func(context.Context, []*worker.Task) []error { panic("boom") },
		}.Handler()})
		waitFor(t, 10*time.Second, "2 tasks failed", func() bool { return b.count(t, "status = 'failed'") == 2 })
		for _, id := range ids {
			e := b.get(t, id).Errors[0]
			if e.Outcome != "panic" || !strings.HasPrefix(e.Error, "bulk handler of bulk panicked, failing every task of its group of 2: panic: boom") {
				t.Errorf("task %d: history %+v", id, e)
			}
		}
	})
}

// row is a typed task of a bulk handler.
type row struct {
	N int `json:"n"`
}

func (row) TaskName() string { return "row.insert" }

// TestHandleBulkTyped: a typed bulk handler sees decoded payloads; a
// task whose payload is not a T fails for good with a decode error, and
// the others run.
func TestHandleBulkTyped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var good []int64
	for i := range 3 {
		id, err := b.client.EnqueueArgs(ctx, row{N: i})
		if err != nil {
			t.Fatal(err)
		}
		good = append(good, id.ID)
	}
	bad := b.enqueue(t, "row.insert", map[string]any{"n": "three"})
	var mu sync.Mutex
	var seen []int
	handlers := worker.Handlers{}
	worker.HandleBulk(handlers, worker.BulkOf[row]{
		MaxSize: 4, MaxWait: 300 * time.Millisecond,
		Handle: func(ctx context.Context, tasks []*worker.TaskOf[row]) []error {
			mu.Lock()
			defer mu.Unlock()
			for _, task := range tasks {
				seen = append(seen, task.Args.N)
			}
			return make([]error, len(tasks))
		},
	})
	start(t, b.pool, worker.Config{}, handlers)
	waitFor(t, 10*time.Second, "4 tasks finished", func() bool { return b.count(t, "status IN ('completed', 'failed')") == 4 })
	for _, id := range good {
		if s := b.get(t, id).Status; s != queue.StatusCompleted {
			t.Errorf("task %d: %s, want completed", id, s)
		}
	}
	task := b.get(t, bad)
	if task.Status != queue.StatusFailed || len(task.Errors) != 1 || !task.Errors[0].Permanent ||
		!strings.Contains(task.Errors[0].Error, fmt.Sprintf("decoding payload of task %d (row.insert) as worker_test.row", bad)) {
		t.Errorf("bad task: %s, errors %+v", task.Status, task.Errors)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(seen)
	if !slices.Equal(seen, []int{0, 1, 2}) {
		t.Errorf("handler saw %v, want [0 1 2]", seen)
	}
}

// TestBulkTimeout: a group's context ends at its tasks' timeout, and each
// task records a timeout.
func TestBulkTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueMany(t, "bulk", 3, queue.WithMaxAttempts(1), queue.WithTimeout(300*time.Millisecond))
	causes := make(chan error, 1)
	start(t, b.pool, worker.Config{}, worker.Handlers{"bulk": worker.BulkHandler{
		MaxSize: 3, MaxWait: time.Hour,
		Handle: func(ctx context.Context, tasks []*worker.Task) []error {
			if _, ok := ctx.Deadline(); !ok {
				panic("no deadline")
			}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			errs := make([]error, len(tasks))
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		},
	}.Handler()})
	waitFor(t, 10*time.Second, "3 tasks failed", func() bool { return b.count(t, "status = 'failed'") == 3 })
	if cause := <-causes; cause == nil || !strings.Contains(cause.Error(), "timed out") {
		t.Errorf("group context's cause %v, want the task timeout", cause)
	}
	for _, id := range ids {
		if e := b.get(t, id).Errors; len(e) != 1 || e[0].Outcome != "timeout" {
			t.Errorf("task %d: history %+v, want one timeout", id, e)
		}
	}
}

// TestBulkShutdownWhileFilling: a worker that stops while a group is
// filling runs the group at once rather than waiting out MaxWait; one whose
// group outlasts the grace period returns its tasks to pending, their
// attempts given back.
func TestBulkShutdownWhileFilling(t *testing.T) {
	t.Parallel()
	t.Run("runs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueueMany(t, "bulk", 2)
		var log bulkLog
		bulk := worker.BulkHandler{
			MaxSize: 100, MaxWait: time.Hour,
			Handle: func(ctx context.Context, tasks []*worker.Task) []error {
				log.add(tasks)
				return nil
			},
		}.Handler()
		// Stop once both tasks' handlers were called: a task claimed but not
		// yet started when the worker stops is returned to pending instead
		// (seen on a loaded machine when the test stopped at "running").
		var entered atomic.Int32
		_, stop := start(t, b.pool, worker.Config{}, worker.Handlers{"bulk": func(ctx context.Context, task *worker.Task) error {
			entered.Add(1)
			return bulk(ctx, task)
		}})
		waitFor(t, 5*time.Second, "2 handlers called", func() bool { return entered.Load() == 2 })
		stop()
		if n := b.count(t, "status = 'completed' AND attempt = 1"); n != 2 {
			t.Fatalf("%d tasks completed after shutdown, want 2", n)
		}
		// One group of 2; or, when the stop came between a handler's call
		// and its joining the group, that task in a group of its own, run
		// at once like the first.
		if got := log.sizes(); !slices.Equal(got, []int{2}) && !slices.Equal(got, []int{1, 1}) {
			t.Fatalf("group sizes %v, want [2] (or [1 1])", got)
		}
	})
	t.Run("grace over", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueueMany(t, "bulk", 2)
		_, stop := start(t, b.pool, worker.Config{ShutdownGrace: 100 * time.Millisecond}, worker.Handlers{"bulk": worker.BulkHandler{
			MaxSize: 100, MaxWait: time.Hour,
			Handle: func(ctx context.Context, tasks []*worker.Task) []error {
				<-ctx.Done()
				errs := make([]error, len(tasks))
				for i := range errs {
					errs[i] = context.Cause(ctx)
				}
				return errs
			},
		}.Handler()})
		waitFor(t, 5*time.Second, "2 tasks running", func() bool { return b.count(t, "status = 'running'") == 2 })
		stop()
		if n := b.count(t, "status = 'pending' AND attempt = 0 AND errors->0->>'outcome' = 'shutdown'"); n != 2 {
			t.Fatalf("%d tasks back to pending with a shutdown entry and their attempt given back, want 2", n)
		}
	})
}

// TestBulkLockLoss: a lost lock session ends the group's context with the
// lock's loss; its tasks are retried.
func TestBulkLockLoss(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueMany(t, "bulk", 3, queue.WithMaxAttempts(3))
	causes := make(chan error, 1)
	var ran atomic.Bool
	w, _ := start(t, b.pool, worker.Config{Mode: worker.ModeAdvisory}, worker.Handlers{"bulk": worker.BulkHandler{
		MaxSize: 3, MaxWait: time.Hour,
		Handle: func(ctx context.Context, tasks []*worker.Task) []error {
			// A rescue gives the attempt back: the second run may be
			// attempt 1 again.
			if ran.Swap(true) {
				return nil
			}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			errs := make([]error, len(tasks))
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		},
	}.Handler()})
	// A group whose handler has not begun when the lock goes is never
	// handed to it: wait for the handler, not only the claim.
	waitFor(t, 5*time.Second, "3 tasks running", func() bool { return ran.Load() && b.count(t, "status = 'running'") == 3 })
	b.terminateLockSession(t, w)
	select {
	case cause := <-causes:
		if cause == nil || !strings.Contains(cause.Error(), "lost the lock") {
			t.Errorf("group context's cause %v, want the lock's loss", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the group's context did not end within 30s of the lock session's end")
	}
	waitFor(t, 15*time.Second, "3 tasks completed", func() bool { return b.count(t, "status = 'completed'") == 3 })
	// A lock_lost outcome and a rescue (the outcome lost the race) alike
	// gave the attempt back.
	if n := b.count(t, "attempt = 1 AND errors->0->>'outcome' IN ('lock_lost', 'rescued')"); n != 3 {
		t.Errorf("%d tasks completed on attempt 1 after a lock_lost outcome or a rescue, want 3", n)
		for _, id := range ids {
			task := b.get(t, id)
			t.Logf("task %d: %s attempt %d errors %+v", id, task.Status, task.Attempt, task.Errors)
		}
	}
}

// TestBulkRunTask: RunTask runs a task of a bulk handler in a group of
// one, without waiting for MaxWait.
func TestBulkRunTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, "bulk", nil)
	var log bulkLog
	w := worker.New(b.pool, testConfig(worker.Config{}))
	res, err := w.RunTask(context.Background(), worker.Handlers{"bulk": worker.BulkHandler{
		MaxSize: 100, MaxWait: time.Hour,
		Handle: func(ctx context.Context, tasks []*worker.Task) []error {
			log.add(tasks)
			return []error{errors.New("no")}
		},
	}.Handler()}, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != worker.OutcomeError || res.Error != "no" || !slices.Equal(log.sizes(), []int{1}) {
		t.Fatalf("RunTask: %+v, groups %v", res, log.sizes())
	}
}
