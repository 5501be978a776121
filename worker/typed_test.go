package worker_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
	"github.com/skiplock/skiplock/worker/skiplocktest"
)

// invoice is a typed task with options of its own.
type invoice struct {
	Number   string   `json:"number"`
	Amount   int      `json:"amount"`
	Lines    []string `json:"lines,omitempty"`
	Reminder bool     `json:"reminder,omitempty"`
}

func (invoice) TaskName() string { return "invoice.send" }

func (invoice) TaskOptions() []queue.Option {
	return []queue.Option{queue.WithQueue("billing"), queue.WithMaxAttempts(4), queue.WithTimeout(3 * time.Second), queue.WithPriority(-2)}
}

// ping is a typed task without options.
type ping struct{}

func (ping) TaskName() string { return "ping" }

func TestTypedTasksEnqueueDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	// The type's options.
	id, err := b.client.EnqueueArgs(ctx, invoice{Number: "A-1", Amount: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := skiplocktest.RequireEnqueued(t, b.pool, "invoice.send", &skiplocktest.Want{
		Payload: map[string]any{"number": "A-1", "amount": 100},
		Queue:   "billing", MaxAttempts: 4, Timeout: 3 * time.Second, Priority: new(-2),
	})
	if got.ID != id.ID {
		t.Fatalf("found task %d, want %d", got.ID, id.ID)
	}
	// The call's options override the type's, in a transaction too.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := b.client.EnqueueArgsTx(ctx, tx, invoice{Number: "A-2"}, queue.WithQueue("urgent"), queue.WithMaxAttempts(9)); err != nil {
		t.Fatal(err)
	}
	skiplocktest.RequireEnqueued(t, tx, "invoice.send", &skiplocktest.Want{
		Payload: map[string]any{"number": "A-2"}, Queue: "urgent", MaxAttempts: 9, Timeout: 3 * time.Second, Priority: new(-2),
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Many at once; a type without options gets the defaults.
	if _, err := b.client.EnqueueMany(ctx, []queue.NewTask{
		queue.NewTaskFrom(invoice{Number: "A-3"}, queue.WithPriority(5)),
		queue.NewTaskFrom(ping{}),
	}); err != nil {
		t.Fatal(err)
	}
	skiplocktest.RequireManyEnqueued(t, b.pool, []skiplocktest.Expected{
		{Name: "invoice.send", Want: skiplocktest.Want{Payload: map[string]any{"number": "A-1"}}},
		{Name: "invoice.send", Want: skiplocktest.Want{Payload: map[string]any{"number": "A-2"}}},
		{Name: "invoice.send", Want: skiplocktest.Want{Payload: map[string]any{"number": "A-3"}, Queue: "billing", Priority: new(5)}},
		{Name: "ping", Want: skiplocktest.Want{Queue: queue.DefaultQueue, MaxAttempts: queue.DefaultMaxAttempts, Payload: map[string]any{}}},
	})

	if _, err := b.client.EnqueueArgs(ctx, nil); err == nil || !strings.Contains(err.Error(), "nil TaskArgs") {
		t.Errorf("EnqueueArgs(nil): %v, want an invalid task error", err)
	}
}

// TestTypedTasksHandle runs typed tasks on two workers, each with its own
// pool, and a task whose payload is not an invoice: it fails for good on its
// first attempt, keeping its payload, and its handler is never called.
func TestTypedTasksHandle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	var mu sync.Mutex
	seen := map[string]invoice{}
	handlers := func() worker.Handlers {
		h := worker.Handlers{}
		worker.Handle(h, func(ctx context.Context, t *worker.TaskOf[invoice]) error {
			mu.Lock()
			seen[t.Args.Number] = t.Args
			mu.Unlock()
			return nil
		})
		return h
	}
	cfg := worker.Config{Queues: []string{"billing"}}
	start(t, pgtest.NewPool(t, b.schema), cfg, handlers())
	start(t, pgtest.NewPool(t, b.schema), cfg, handlers())

	const n = 40
	for i := range n {
		if _, err := b.client.EnqueueArgs(ctx, invoice{Number: "N-" + string(rune('A'+i%26)) + string(rune('a'+i/26)), Amount: i, Lines: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	bad := b.enqueue(t, "invoice.send", map[string]any{"number": 42}, queue.WithQueue("billing"), queue.WithMaxAttempts(5))

	waitFor(t, 2*time.Second, "every invoice completed and the bad one failed", func() bool {
		return b.count(t, "status = 'completed'") == n && b.count(t, "status = 'failed'") == 1
	})
	mu.Lock()
	if len(seen) != n || seen["N-Ba"].Amount != 1 || seen["N-Ba"].Lines[0] != "x" {
		t.Errorf("handlers saw %d invoices (N-Ba: %+v), want %d, decoded", len(seen), seen["N-Ba"], n)
	}
	mu.Unlock()

	task := b.get(t, bad)
	if task.Attempt != 1 || !task.FailedPermanently() || len(task.Errors) != 1 ||
		!strings.Contains(task.Errors[0].Error, "decoding payload of task") || !strings.Contains(task.Errors[0].Error, "as worker_test.invoice") {
		t.Errorf("bad payload: attempt %d of %d, permanent %v, errors %+v; want one permanent decoding error naming the type",
			task.Attempt, task.MaxAttempts, task.FailedPermanently(), task.Errors)
	}
	if string(task.Payload) != `{"number": 42}` {
		t.Errorf("bad payload not kept: %s", task.Payload)
	}
}

func TestHandlePanicsOnWiringMistakes(t *testing.T) {
	t.Parallel()
	fn := func(context.Context, *worker.TaskOf[ping]) error { return nil }
	for _, c := range []struct {
		what     string
		handlers worker.Handlers
		says     string
	}{
		{"nil handlers", nil, "nil Handlers"},
		{"duplicate", worker.Handlers{"ping": func(context.Context, *worker.Task) error { return nil }}, `"ping" already has a handler`},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), c.says) {
					t.Errorf("%s: recovered %v, want a panic saying %q", c.what, r, c.says)
				}
			}()
			worker.Handle(c.handlers, fn)
		}()
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "TaskName is empty") {
			t.Errorf("empty name: recovered %v", r)
		}
	}()
	worker.Handle(worker.Handlers{}, func(context.Context, *worker.TaskOf[unnamed]) error { return nil })
}

type unnamed struct{}

func (unnamed) TaskName() string { return "" }

// TestTypedPeriodicTask: a periodic task given as a typed payload takes its
// name and options from the type.
func TestTypedPeriodicTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ran := make(chan *worker.TaskOf[invoice], 1)
	h := worker.Handlers{}
	worker.Handle(h, func(_ context.Context, t *worker.TaskOf[invoice]) error {
		select {
		case ran <- t:
		default:
		}
		return nil
	})
	start(t, b.pool, worker.Config{Queues: []string{"billing"}, Periodic: []worker.PeriodicTask{
		{Every: time.Second, Payload: invoice{Number: "monthly"}, Options: []queue.Option{queue.WithMaxAttempts(2)}},
	}}, h)
	select {
	case got := <-ran:
		if got.Args.Number != "monthly" || got.Queue != "billing" || got.MaxAttempts != 2 || got.Name != "invoice.send" {
			t.Errorf("ran %s in %s with max attempts %d, args %+v; want invoice.send in billing, 2 (the call's), monthly", got.Name, got.Queue, got.MaxAttempts, got.Args)
		}
	case <-time.After(pgtest.Patient(2 * time.Second)):
		t.Fatal("the periodic invoice did not run")
	}
}
