package worker

import (
	"context"
	"sync"
	"time"
)

// taskCtx is a handler's context. It behaves as the chain it replaces,
// context.WithTimeoutCause(context.WithCancelCause(context.WithValue(
// context.Background(), scopeKey{}, scope)), timeout, errTimeout): Done
// closes on the attempt's timeout (Err DeadlineExceeded, context.Cause
// errTimeout), on a cancellation with a cause (Err Canceled, Cause that
// cause) and when the attempt settles; Deadline reports the deadline;
// Value carries the scope. Contexts derived from it see its Err and Cause
// as they would a standard parent's, synchronously.
//
// It lives inside its execution, so it costs no allocation of its own, and
// its deadline takes no timer: the worker's deadlines list (deadlines.go)
// expires it. The chain it replaces cost a worker 7 allocations and a
// runtime timer per task, 9.5% of its CPU in a 100,000-task profile.
type taskCtx struct {
	scope    *scope
	deadline time.Time // zero: none

	mu   sync.Mutex
	done chan struct{} // made by the first Done; nil until then
	err  error         // Canceled or DeadlineExceeded once cancelled
	// cause is what context.Cause reports once err is set: it finds it
	// through Value, which answers for the standard library's own key
	// with causeCtx, a cancelled standard context made on first use.
	cause    error
	causeCtx context.Context
	// afters are the functions registered by AfterFunc (how a context
	// derived from this one, or context.AfterFunc, learns of its end).
	afters  []afterFunc
	afterID uint64
}

type afterFunc struct {
	id uint64
	f  func()
}

// closedDone is the Done of a taskCtx cancelled before anyone asked for it.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (c *taskCtx) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

func (c *taskCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.err != nil {
			return closedDone
		}
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *taskCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Cause is context.Cause(c), without the lookup through Value.
func (c *taskCtx) Cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

func (c *taskCtx) Value(key any) any {
	if _, ok := key.(scopeKey); ok {
		return c.scope
	}
	c.mu.Lock()
	if c.err == nil {
		// No other value, and no cause yet: context.Cause falls back to
		// Err, nil.
		c.mu.Unlock()
		return nil
	}
	if c.causeCtx == nil {
		cc, cancel := context.WithCancelCause(context.Background())
		cancel(c.cause)
		c.causeCtx = cc
	}
	cc := c.causeCtx
	c.mu.Unlock()
	// Nil for every key but the standard library's, for which it is the
	// cancelled context whose cause context.Cause reports.
	return cc.Value(key)
}

// AfterFunc is how the context package attaches a context derived from c
// (and context.AfterFunc its function): f runs when c is cancelled, in the
// cancelling goroutine, as a standard parent cancels its children; on a c
// already cancelled, in a goroutine of its own, as the caller may hold the
// lock f takes.
func (c *taskCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.afterID++
	id := c.afterID
	c.afters = append(c.afters, afterFunc{id, f})
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, a := range c.afters {
			if a.id == id {
				c.afters = append(c.afters[:i], c.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}

func (c *taskCtx) String() string { return "skiplock task context" }

// cancel ends c once: err is context.Canceled, or context.DeadlineExceeded
// for the timeout; a nil cause is err. It reports whether this call ended
// it.
func (c *taskCtx) cancel(err, cause error) bool {
	if cause == nil {
		cause = err
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return false
	}
	c.err, c.cause = err, cause
	if c.done != nil {
		close(c.done)
	}
	afters := c.afters
	c.afters = nil
	c.mu.Unlock()
	for _, a := range afters {
		a.f()
	}
	return true
}

// cancelCause is the context.CancelCauseFunc of c.
func (c *taskCtx) cancelCause(cause error) { c.cancel(context.Canceled, cause) }

// expire ends c at its deadline.
func (c *taskCtx) expire() { c.cancel(context.DeadlineExceeded, errTimeout) }
