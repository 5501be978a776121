package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/skiplock/skiplock/queue"
)

// Bulk handlers: many tasks of one name in one call. Each claimed task
// runs as any task does (its slot, its lock, its timeout, its middleware,
// its OnError hook, its outcome and history); its handler, a bulk
// handler's Handler, waits in the worker's group of that handler until the
// group is full or MaxWait has passed since its first task came, and the
// first task's goroutine then calls the bulk function once for them all
// and hands each task its own error.

// Defaults of BulkHandler and BulkOf.
const (
	defaultBulkMaxSize = 100
	defaultBulkMaxWait = 100 * time.Millisecond
)

// BulkHandler runs up to MaxSize tasks of one name in one call: bulk API
// calls, bulk inserts. Register its Handler under the tasks' name:
//
//	handlers["insert-row"] = worker.BulkHandler{
//		Handle: func(ctx context.Context, tasks []*worker.Task) []error {
//			return insertAll(ctx, tasks) // one error per task, nil for success
//		},
//		MaxSize: 500,
//		MaxWait: 50 * time.Millisecond,
//	}.Handler()
//
// A group runs once it holds MaxSize tasks, or MaxWait after its first
// task arrived, whichever comes first; a worker shutting down runs the
// groups it is filling at once. Each task holds one of the worker's
// Concurrency slots while it waits, so a group never holds more than
// Concurrency tasks.
//
// Handle returns one error per task, in the order of tasks: nil completes
// that task; an error fails its attempt, retried or failed by the same
// rules as a single handler's (Permanent, RetryAfter, Snooze and Cancel
// work per task). A nil slice completes every task. A slice of another
// length fails the attempt of every task of the group, with an error
// saying so; a panic fails every task's attempt as a panic (Config.OnPanic
// sees it once per task). Each task keeps its own attempts, retries, error
// history, OnError hook and middleware (which wraps the task's wait for
// the group and the group's run).
//
// Handle's context ends when that of any task of the group would: the
// earliest of their timeouts, the worker's shutdown past its grace, or a
// lost lock (the task may then run elsewhere). A cancel of one running task
// does not end the group: that task becomes cancelled once the group
// returns, unless Handle completed it. A task whose context ends while the
// group is filling leaves it without running, with that outcome (a
// shutdown returns it to pending with its attempt given back). The context
// carries no task: SetOutput, SetProgress and SaveCheckpoint return an
// error in it.
//
// Worker.RunTask runs a task of a bulk handler alone, in a group of one.
type BulkHandler struct {
	// Handle runs a group: one to MaxSize tasks of one name.
	Handle func(ctx context.Context, tasks []*Task) []error
	// MaxSize is the most tasks in one group. Defaults to 100.
	MaxSize int
	// MaxWait bounds how long a group waits to fill, from its first task.
	// Defaults to 100ms.
	MaxWait time.Duration
}

// Handler returns the handler to register under the tasks' name. It panics
// if Handle is nil or MaxSize or MaxWait is negative: mistakes of the
// program's own wiring, made when it starts.
func (b BulkHandler) Handler() Handler {
	switch {
	case b.Handle == nil:
		panic("skiplock: worker.BulkHandler: Handle is nil")
	case b.MaxSize < 0:
		panic(fmt.Sprintf("skiplock: worker.BulkHandler: MaxSize must not be negative, got %d", b.MaxSize))
	case b.MaxWait < 0:
		panic(fmt.Sprintf("skiplock: worker.BulkHandler: MaxWait must not be negative, got %s", b.MaxWait))
	}
	if b.MaxSize == 0 {
		b.MaxSize = defaultBulkMaxSize
	}
	if b.MaxWait == 0 {
		b.MaxWait = defaultBulkMaxWait
	}
	spec := &bulkSpec{handle: b.Handle, maxSize: b.MaxSize, maxWait: b.MaxWait}
	return spec.run
}

// BulkOf is a BulkHandler whose tasks' payloads are decoded as a T, as a
// bulk handler registered with HandleBulk sees them.
type BulkOf[T queue.TaskArgs] struct {
	// Handle runs a group; it returns one error per task, in order, or
	// nil for all completed.
	Handle func(ctx context.Context, tasks []*TaskOf[T]) []error
	// MaxSize and MaxWait are BulkHandler's.
	MaxSize int
	MaxWait time.Duration
}

// HandleBulk registers b in handlers as the bulk handler of T's tasks,
// under the name T's zero value gives (TaskName), as Handle does for a
// single handler.
//
// Payloads are decoded before Handle is called. A task whose payload is
// not a T fails for good on its first attempt, with one error that names
// the task and the type, and is left out of the group; the others run.
//
// HandleBulk panics if handlers is nil, if the name is empty or already
// has a handler, or as BulkHandler.Handler does.
func HandleBulk[T queue.TaskArgs](handlers Handlers, b BulkOf[T]) {
	var zero T
	name := zero.TaskName()
	switch {
	case handlers == nil:
		panic(fmt.Sprintf("skiplock: worker.HandleBulk[%T]: nil Handlers", zero))
	case name == "":
		panic(fmt.Sprintf("skiplock: worker.HandleBulk[%T]: TaskName is empty", zero))
	case handlers[name] != nil:
		panic(fmt.Sprintf("skiplock: worker.HandleBulk[%T]: task name %q already has a handler", zero, name))
	case b.Handle == nil:
		panic(fmt.Sprintf("skiplock: worker.HandleBulk[%T]: Handle is nil", zero))
	}
	handlers[name] = BulkHandler{MaxSize: b.MaxSize, MaxWait: b.MaxWait, Handle: func(ctx context.Context, tasks []*Task) []error {
		errs := make([]error, len(tasks))
		typed := make([]*TaskOf[T], 0, len(tasks))
		at := make([]int, 0, len(tasks)) // typed[j] is tasks[at[j]]
		for i, t := range tasks {
			tt := &TaskOf[T]{Task: t}
			if err := json.Unmarshal(t.Payload, &tt.Args); err != nil {
				errs[i] = Permanent(fmt.Errorf("decoding payload of task %d (%s) as %T: %w", t.ID, t.Name, zero, err))
				continue
			}
			typed = append(typed, tt)
			at = append(at, i)
		}
		if len(typed) == 0 {
			return errs
		}
		for j, err := range bulkResults(name, len(typed), b.Handle(ctx, typed)) {
			errs[at[j]] = err
		}
		return errs
	}}.Handler()
}

// bulkSpec is one BulkHandler, as registered; each worker that runs it
// keeps a gatherer of its own (Worker.gathererFor).
type bulkSpec struct {
	handle  func(ctx context.Context, tasks []*Task) []error
	maxSize int
	maxWait time.Duration
}

// run is the Handler of a bulk handler: it joins the task to the group
// of the worker that runs it, waits for the group and returns the task's
// own error. Outside a worker's Run (RunTask, or a call by hand) the task
// runs alone.
func (s *bulkSpec) run(ctx context.Context, t *Task) error {
	sc := scopeOf(ctx)
	if sc == nil || sc.worker == nil || sc.alone {
		return s.call(ctx, []*Task{t})[0]
	}
	return sc.worker.gathererFor(s).join(ctx, t)
}

// call runs the bulk function on tasks and returns one error per task:
// a panic, or a result of the wrong length, is every task's error.
func (s *bulkSpec) call(ctx context.Context, tasks []*Task) (errs []error) {
	name := tasks[0].Name
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("bulk handler of %s panicked, failing every task of its group of %d: %w",
				name, len(tasks), &PanicError{Value: r, Stack: debug.Stack()})
			errs = make([]error, len(tasks))
			for i := range errs {
				errs[i] = err
			}
		}
	}()
	return bulkResults(name, len(tasks), s.handle(ctx, tasks))
}

// bulkResults checks a bulk function's results: nil is n successes; a
// slice of the wrong length is an error for every task.
func bulkResults(name string, n int, errs []error) []error {
	if errs == nil {
		return make([]error, n)
	}
	if len(errs) != n {
		err := fmt.Errorf("skiplock: bulk handler of %s returned %d results for a group of %d tasks; "+
			"it must return one per task, in order (nil for success), or a nil slice when all succeeded", name, len(errs), n)
		errs = make([]error, n)
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// gatherer gathers one bulk handler's tasks into groups, in one worker.
type gatherer struct {
	spec    *bulkSpec
	max     int // spec.maxSize, at most the worker's Concurrency
	mu      sync.Mutex
	filling *group // the group that tasks join; nil for none
	closing bool   // the worker is shutting down: groups wait for nobody
}

// group is the tasks of one call: filling until taken, then run by its first member.
type group struct {
	members []*member
	ready   chan struct{} // closed when taken
	taken   bool
	timer   *time.Timer
}

// member is one task of a group, waiting for its error.
type member struct {
	ctx  context.Context
	task *Task
	res  chan memberResult
}

// memberResult is a member's error, and why the group's context ended if
// it did (nil if not).
type memberResult struct{ err, cause error }

// gathererFor returns the worker's gatherer of spec, made on first use.
func (w *Worker) gathererFor(s *bulkSpec) *gatherer {
	if b, ok := w.gatherers.Load(s); ok {
		return b.(*gatherer)
	}
	b, _ := w.gatherers.LoadOrStore(s, &gatherer{spec: s, max: max(min(s.maxSize, w.cfg.Concurrency), 1)})
	return b.(*gatherer)
}

// flushBulk runs every group being filled now, and makes later groups
// run without waiting: the worker is shutting down.
func (w *Worker) flushBulk() {
	w.gatherers.Range(func(_, v any) bool {
		b := v.(*gatherer)
		b.mu.Lock()
		b.closing = true
		if b.filling != nil {
			b.takeLocked(b.filling)
		}
		b.mu.Unlock()
		return true
	})
}

// join adds a task to the group being filled and returns the task's error
// once the group has run. The first task of a group runs it.
func (b *gatherer) join(ctx context.Context, t *Task) error {
	m := &member{ctx: ctx, task: t, res: make(chan memberResult, 1)}
	b.mu.Lock()
	bt := b.filling
	first := bt == nil
	if first {
		bt = &group{ready: make(chan struct{})}
		b.filling = bt
		wait := b.spec.maxWait
		if b.closing {
			wait = 0
		}
		bt.timer = time.AfterFunc(wait, func() { b.take(bt) })
	}
	bt.members = append(bt.members, m)
	if len(bt.members) >= b.max {
		b.takeLocked(bt)
	}
	b.mu.Unlock()
	// A task whose context ends while the group fills (a shutdown past its
	// grace, a lost lock, its timeout) runs the group now.
	stop := context.AfterFunc(ctx, func() { b.take(bt) })
	defer stop()
	if first {
		<-bt.ready
		b.runCall(bt)
	}
	r := <-m.res
	if r.err != nil && r.cause != nil && ctx.Err() == nil {
		// The group's context ended for another task's timeout, lost lock
		// or the shutdown (its cancellation may not have reached this
		// task's yet): this task's failure is recorded as that, not as an
		// error of its own.
		if sc := scopeOf(ctx); sc != nil && sc.ctx != nil {
			sc.ctx.cancelCause(r.cause)
		}
	}
	return r.err
}

func (b *gatherer) take(bt *group) {
	b.mu.Lock()
	b.takeLocked(bt)
	b.mu.Unlock()
}

func (b *gatherer) takeLocked(bt *group) {
	if bt.taken {
		return
	}
	bt.taken = true
	if b.filling == bt {
		b.filling = nil
	}
	bt.timer.Stop()
	close(bt.ready)
}

// runCall calls the bulk function once for the members whose context
// has not ended, and gives every member its error.
func (b *gatherer) runCall(bt *group) {
	live := make([]*member, 0, len(bt.members))
	for _, m := range bt.members {
		if m.ctx.Err() != nil {
			m.res <- memberResult{err: fmt.Errorf("not run: its context ended while its group was filling: %w", context.Cause(m.ctx))}
			continue
		}
		live = append(live, m)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := callContext(live)
	defer cancel()
	tasks := make([]*Task, len(live))
	for i, m := range live {
		tasks[i] = m.task
	}
	errs := b.spec.call(ctx, tasks)
	var cause error
	if ctx.Err() != nil {
		cause = context.Cause(ctx)
	}
	for i, err := range errs {
		live[i].res <- memberResult{err: err, cause: cause}
	}
}

// callContext is the context of a group's run: it ends when any member's
// ends, with its cause (its deadline the earliest of theirs), but for a
// member's cancel request, which is that task's alone.
func callContext(live []*member) (context.Context, func()) {
	base, cancel := context.WithCancelCause(context.Background())
	ctx, stopDeadline := context.Context(base), context.CancelFunc(func() {})
	var deadline time.Time
	stops := make([]func() bool, 0, len(live))
	for _, m := range live {
		if d, ok := m.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
		stops = append(stops, context.AfterFunc(m.ctx, func() {
			if cause := context.Cause(m.ctx); !errors.Is(cause, ErrCancelled) {
				cancel(cause)
			}
		}))
	}
	if !deadline.IsZero() {
		ctx, stopDeadline = context.WithDeadlineCause(base, deadline, errTimeout)
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		stopDeadline()
		cancel(context.Canceled)
	}
}
