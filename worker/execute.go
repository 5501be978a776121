package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/queue"
)

// Causes of a handler's context cancellation (context.Cause).
var (
	errTimeout  = errors.New("skiplock: task timed out")
	errShutdown = errors.New("skiplock: worker shutting down")
	errLockLost = errors.New("skiplock: worker lost the lock session holding this task; it may run elsewhere")
	// ErrCancelled is the cause (context.Cause) of a handler's context when
	// its task was cancelled with queue.Client.Cancel.
	ErrCancelled = errors.New("skiplock: task cancelled")
)

// execution is one attempt of one claimed task in this process.
type execution struct {
	task *Task
	// claimed is the claim's started_at, which fences every write of the
	// attempt with it (TaskFinishMany); the Task's copy is the handler's.
	claimed time.Time
	slots   *semaphore.Weighted // the queue's own slots, if it has a cap
	gen     uint64              // lock session generation holding the task's lock
	limits  []int32             // limit slot locks held with the task's lock (clusterlimits.go)
	// gated: the task held a place that another task may be waiting for
	// (a concurrency limit's slot, its exclusive key), so its outcome
	// rides the next claim (handoff.go), or its end wakes the claim loops
	// here and in every other worker (completer.flush).
	gated        bool
	exclusiveKey string // the exclusive key it holds, if any
	timeout      time.Duration
	// abandonAt is when a handler still running is abandoned (zero: not
	// watched by abandonOverdue; an attempt run by RunTask has a timer).
	abandonAt time.Time
	ctx       context.Context // the handler's (own.ctx); cancelled by timeout or cancel
	scope     *scope          // what the handler's ctx carries (its output)
	// dl lists it for its deadline when its timeout is the worker's
	// (deadlines.go), with dlPrev, dlNext and listed; ownTimer expires a
	// timeout of its own.
	dl             *deadlines
	dlPrev, dlNext *execution
	listed         bool
	ownTimer       *time.Timer

	settled atomic.Bool // set once by whoever records the outcome
	mu      sync.Mutex
	timers  []*time.Timer

	// onSettle, if set, takes the outcome instead of the completer: an
	// attempt run by RunTask, outside Run's slots and bookkeeping.
	onSettle func(finish, result)

	// own holds what task and scope point to, for an execution made by
	// newExecution.
	own struct {
		task  Task
		scope scope
		ctx   taskCtx
	}
}

// roomy says that the task's claim met only limits with room to spare
// (a queue claim that took all it asked for): no task waits for its
// place, which its end therefore need not hurry to free. committed, when
// not nil, is closed once the claim's commit has returned: the task
// started before it (earlyclaim.go).
func (w *Worker) launch(r db.TaskClaimRow, gen uint64, queueSlots *semaphore.Weighted, limited, roomy bool, committed <-chan struct{}) {
	e := w.newExecution(r, gen, queueSlots)
	e.scope.committed = committed
	// Lease mode keeps no slot locks: a limit counts running rows, so any
	// task claimed while limits exist may hold a place.
	e.gated = e.gated || limited && w.cfg.Mode == ModeLease
	if roomy && e.exclusiveKey == "" {
		// Its outcome is gathered with others and its unlock rides the
		// next claim, as a plain task's: written at once, the outcomes of
		// a never-binding limit's tasks went out 142 to a commit instead
		// of 205, and cost 0.88x of plain throughput. A block it leaves
		// is still announced once released.
		e.gated = false
	}
	if e.timeout > 0 {
		// abandonOverdue watches it (executors.go).
		e.abandonAt = time.Now().Add(e.timeout + w.cfg.AbandonAfter)
	}
	w.settled.Add(1)
	w.mu.Lock()
	w.inflight[e] = struct{}{}
	w.mu.Unlock()
	// A lock session lost since the claim cancelled the running tasks it
	// found; one launched after that look is cancelled here (lostGen is
	// set before the look), and its handler not called.
	if w.guard.lost(gen) {
		w.cancelExecution(e, errLockLost)
	}
	w.execs.start(e, w.runExecution)
}

func (w *Worker) executeHandlers(e *execution) { w.execute(e, w.handlers) }

// newExecution prepares the attempt of a claimed task: its context, with
// the task's timeout (or the worker's).
func (w *Worker) newExecution(r db.TaskClaimRow, gen uint64, queueSlots *semaphore.Weighted) *execution {
	timeout := w.cfg.TaskTimeout
	if r.TimeoutMs != nil {
		timeout = time.Duration(*r.TimeoutMs) * time.Millisecond
	}
	claimed := derefTime(r.StartedAt)
	// One allocation for the execution, its Task, its scope and its
	// context, which live and die together.
	e := &execution{claimed: claimed, slots: queueSlots, gen: gen, limits: r.LimitLocks, gated: len(r.LimitLocks) > 0 || r.ExclusiveKey != "", exclusiveKey: r.ExclusiveKey,
		timeout: timeout}
	setTask(&e.own.task, &r)
	e.task, e.scope = &e.own.task, &e.own.scope
	sc := e.scope
	sc.taskID, sc.attempt, sc.claimed, sc.limit, sc.worker = r.ID, r.Attempt, claimed, w.cfg.MaxOutputSize, w
	c := &e.own.ctx
	c.scope, sc.ctx = sc, c
	e.ctx = c
	if timeout > 0 {
		c.deadline = time.Now().Add(timeout)
		if timeout == w.cfg.TaskTimeout {
			e.dl = &w.deadlines
			e.dl.add(e)
		} else {
			e.ownTimer = time.AfterFunc(timeout, c.expire)
		}
	}
	return e
}

// stopDeadline lets go of what would expire e's context at its deadline.
func (e *execution) stopDeadline() {
	if e.dl != nil {
		e.dl.remove(e)
	}
	if e.ownTimer != nil {
		e.ownTimer.Stop()
	}
}

// armAbandon abandons a timed execution whose handler is still running
// AbandonAfter past its timeout, for an attempt outside Run (RunTask); Run's
// own are watched by abandonOverdue.
func (w *Worker) armAbandon(e *execution) {
	if e.timeout > 0 {
		e.addTimer(time.AfterFunc(e.timeout+w.cfg.AbandonAfter, func() { w.abandon(e) }))
	}
}

func (e *execution) addTimer(t *time.Timer) {
	e.mu.Lock()
	e.timers = append(e.timers, t)
	e.mu.Unlock()
}

// execute runs the handler and records its outcome in a defer, so that the
// lock is handed back however the handler ends.
func (w *Worker) execute(e *execution, handlers Handlers) {
	var res result
	defer func() { w.settle(e, res) }()

	if cause := e.own.ctx.Cause(); errors.Is(cause, errLockLost) {
		// Its lock went before its handler began: the task may already
		// run elsewhere.
		res = w.classify(e, cause)
		return
	}
	h, ok := handlers[e.task.Name]
	if !ok {
		// Claims take only the names the worker handles, so this is a
		// race at most: the task goes back to pending, its attempt given
		// back, for a worker that handles it.
		res = noHandler(e.task.Name, handlers)
		return
	}
	if err := w.decrypt(e.task); err != nil {
		res = result{outcome: outcomeError, permanent: true, err: err.Error()}
		return
	}
	res = w.classify(e, w.decide(e, callHandler(h, e.ctx, e.task)))
	if res.outcome == "" {
		res.output = e.scope.completed(&res)
	}
}

// decrypt replaces an encrypted payload with its plaintext. Its error names
// the key ID, never the payload or a key.
func (w *Worker) decrypt(t *Task) error {
	plain, err := w.cfg.Keyring.Decrypt(t.Name, t.Payload)
	if errors.Is(err, queue.ErrUnknownKey) {
		return fmt.Errorf("%w; add the key to the worker's Config.Keyring, then `skiplock requeue %d`", err, t.ID)
	}
	if err != nil {
		return err
	}
	t.Payload = plain
	return nil
}

// PanicError is a handler's panic, recovered, as Config.OnPanic sees it
// and as the task's history records it (outcome panic).
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", p.Value, p.Stack) }

func callHandler(h Handler, ctx context.Context, t *Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h(ctx, t)
}

// decide hands a failed attempt to Config.OnPanic or Config.OnError, whose
// return then stands for the handler's. The hooks see the attempt's own
// failures only (an error, a timeout, a panic): shutdown, lost locks and
// cancellation requests are not the task's doing, and a snooze or a
// cancellation is a decision already.
func (w *Worker) decide(e *execution, err error) error {
	if err == nil || (w.cfg.OnError == nil && w.cfg.OnPanic == nil) {
		return err
	}
	var p *PanicError
	if errors.As(err, &p) {
		if w.cfg.OnPanic == nil {
			return err
		}
		return w.callHook(e, err, func() error { return w.cfg.OnPanic(e.ctx, e.task, p) })
	}
	if out := OutcomeOf(e.ctx, err); w.cfg.OnError == nil || (out != OutcomeError && out != OutcomeTimeout) {
		return err
	}
	return w.callHook(e, err, func() error { return w.cfg.OnError(e.ctx, e.task, err) })
}

// callHook runs an error hook; a hook that panics is logged, and the
// attempt keeps its own error.
func (w *Worker) callHook(e *execution, err error, hook func() error) (decided error) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("skiplock: OnError or OnPanic panicked; the attempt keeps its error", "task_id", e.task.ID, "name", e.task.Name, "panic", r)
			decided = err
		}
	}()
	return hook()
}

// cancelExecution cancels a handler's context with cause, and abandons it if
// it has not returned AbandonAfter later.
func (w *Worker) cancelExecution(e *execution, cause error) {
	if e.settled.Load() {
		return
	}
	e.own.ctx.cancelCause(cause)
	e.addTimer(time.AfterFunc(w.cfg.AbandonAfter, func() { w.abandon(e) }))
}

func (w *Worker) abandon(e *execution) {
	res := result{outcome: outcomeAbandoned, err: fmt.Sprintf("handler did not return within %s of its context's cancellation (%v); abandoned",
		w.cfg.AbandonAfter, context.Cause(e.ctx))}
	if errors.Is(context.Cause(e.ctx), errShutdown) {
		res.outcome = outcomeShutdown
	}
	if w.settle(e, res) {
		w.log.Warn("skiplock: abandoned a handler that ignored its context", "task_id", e.task.ID, "name", e.task.Name)
	}
}

// settle records an execution's outcome once: it hands the outcome to the
// completer, which writes it, then queues the release of its lock and
// frees its slot.
func (w *Worker) settle(e *execution, res result) bool {
	if !e.settled.CompareAndSwap(false, true) {
		return false
	}
	e.mu.Lock()
	for _, t := range e.timers {
		t.Stop()
	}
	e.mu.Unlock()
	e.stopDeadline()
	e.own.ctx.cancelCause(context.Canceled)

	f := w.finishFor(e, res)
	w.cfg.Observer.Finished(e.task, Outcome(res.outcome), f.next(), time.Since(e.task.StartedAt))
	if e.onSettle != nil {
		e.onSettle(f, res)
		return true
	}

	w.mu.Lock()
	delete(w.inflight, e)
	w.mu.Unlock()
	f.slots = e.slots
	// The slot goes back once the outcome is written (the completer frees
	// it): when writes fall behind, claims wait, rather than piling up
	// unwritten outcomes that each hold a lock. A task that held a place
	// hands its outcome to the next claim instead (handoff.go).
	if !w.handOff(f) {
		w.comp.add(f)
	}
	w.settled.Done()
	return true
}

// setTask sets t, a handler's Task, from a claimed row.
func setTask(t *Task, r *db.TaskClaimRow) {
	*t = Task{
		ID:          r.ID,
		Name:        r.Name,
		Queue:       r.Queue,
		Payload:     r.Payload,
		Metadata:    r.Metadata,
		Priority:    int(r.Priority),
		Attempt:     int(r.Attempt),
		MaxAttempts: int(r.MaxAttempts),
		CreatedAt:   r.CreatedAt,
		RunAt:       r.RunAt,
		StartedAt:   derefTime(r.StartedAt),
	}
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// noHandler is the result of an attempt at a task whose name has no
// handler in handlers: never the task's fault, so it is handed back.
func noHandler(name string, handlers Handlers) result {
	return result{outcome: outcomeNoHandler, err: fmt.Sprintf("no handler for task name %q in this worker (it handles: %s); "+
		"left pending for a worker that handles it", name, strings.Join(handlerNames(handlers), ", "))}
}
