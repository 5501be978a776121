package worker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// stdTaskCtx is the chain of standard contexts that taskCtx stands for, and
// its two ways to end.
func stdTaskCtx(t *testing.T, sc *scope, timeout time.Duration) (ctx context.Context, cancel context.CancelCauseFunc) {
	base, cancel := context.WithCancelCause(context.WithValue(context.Background(), scopeKey{}, sc))
	ctx, stop := context.WithTimeoutCause(base, timeout, errTimeout)
	t.Cleanup(stop)
	return ctx, cancel
}

type ctxView struct {
	err, cause           error
	childErr, childCause error
	valueErr             error // through a context.WithValue of it
	afterFuncRan         bool
}

// endedView ends a context as end says, and reads what it, a context
// derived from it before, and context.AfterFunc then show.
func endedView(t *testing.T, ctx context.Context, end func()) ctxView {
	t.Helper()
	child, stopChild := context.WithCancel(ctx)
	defer stopChild()
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	valued := context.WithValue(ctx, struct{}{}, 1)
	end()
	// A standard parent ends its children before its cancel returns.
	v := ctxView{err: ctx.Err(), cause: context.Cause(ctx), childErr: child.Err(), childCause: context.Cause(child), valueErr: valued.Err()}
	select {
	case <-ran:
		v.afterFuncRan = true
	case <-time.After(10 * time.Second):
	}
	select {
	case <-ctx.Done():
	default:
		t.Error("Done is open after the context ended")
	}
	return v
}

func TestTaskCtxActsAsStandardChain(t *testing.T) {
	sc := &scope{taskID: 7}
	cases := []struct {
		name string
		end  func(c *taskCtx)
		std  func(cancel context.CancelCauseFunc)
	}{
		{"cancelled with a cause", func(c *taskCtx) { c.cancelCause(ErrCancelled) }, func(cancel context.CancelCauseFunc) { cancel(ErrCancelled) }},
		{"settled", func(c *taskCtx) { c.cancelCause(context.Canceled) }, func(cancel context.CancelCauseFunc) { cancel(context.Canceled) }},
		{"timed out", func(c *taskCtx) { c.expire() }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var std context.Context
			var want ctxView
			if tc.std != nil {
				ctx, cancel := stdTaskCtx(t, sc, time.Hour)
				std, want = ctx, endedView(t, ctx, func() { tc.std(cancel) })
			} else {
				ctx, cancel := stdTaskCtx(t, sc, 20*time.Millisecond)
				defer cancel(nil)
				std, want = ctx, endedView(t, ctx, func() { <-ctx.Done() })
			}
			c := &taskCtx{scope: sc, deadline: time.Now().Add(time.Hour)}
			if err, cause := c.Err(), context.Cause(c); err != nil || cause != nil {
				t.Fatalf("before it ends: Err %v, Cause %v; want nil, nil", err, cause)
			}
			got := endedView(t, c, func() { tc.end(c) })
			if got != want {
				t.Errorf("got %+v\nwant (standard chain) %+v", got, want)
			}
			if scopeOf(c) != sc || scopeOf(std) != sc {
				t.Error("the scope is not carried")
			}
			if c.Value("other") != nil {
				t.Error("a value for an unknown key")
			}
			if len(c.afters) != 0 {
				t.Errorf("%d AfterFunc registrations kept after the end", len(c.afters))
			}
			// Ended once: a later end changes nothing.
			c.expire()
			c.cancelCause(errShutdown)
			if c.Err() != want.err || context.Cause(c) != want.cause {
				t.Errorf("after a second end: Err %v, Cause %v; want %v, %v", c.Err(), context.Cause(c), want.err, want.cause)
			}
			// Derived after its end, as from a standard parent.
			late, stop := context.WithCancel(c)
			defer stop()
			if late.Err() != want.err || context.Cause(late) != want.cause {
				t.Errorf("derived after the end: Err %v, Cause %v; want %v, %v", late.Err(), context.Cause(late), want.err, want.cause)
			}
		})
	}
}

func TestTaskCtxDeadlineAndChildStop(t *testing.T) {
	at := time.Now().Add(time.Minute)
	c := &taskCtx{deadline: at}
	if d, ok := c.Deadline(); !ok || !d.Equal(at) {
		t.Errorf("Deadline() = %v, %v; want %v, true", d, ok, at)
	}
	if _, ok := (&taskCtx{}).Deadline(); ok {
		t.Error("a context without a timeout reports a deadline")
	}
	// A child that ends first leaves no registration behind.
	child, stop := context.WithCancel(c)
	stopAfter := context.AfterFunc(c, func() { t.Error("a stopped AfterFunc ran") })
	if len(c.afters) != 2 {
		t.Fatalf("%d registrations, want 2", len(c.afters))
	}
	stop()
	if !stopAfter() {
		t.Error("stopping an AfterFunc that had not run reported false")
	}
	if len(c.afters) != 0 {
		t.Errorf("%d registrations left after the child and AfterFunc stopped", len(c.afters))
	}
	c.cancelCause(errShutdown)
	if !errors.Is(child.Err(), context.Canceled) || context.Cause(child) != context.Canceled {
		t.Errorf("the stopped child: Err %v, Cause %v", child.Err(), context.Cause(child))
	}
}

// newListed is an execution whose context has a deadline at, listed in d.
func newListed(d *deadlines, at time.Time) *execution {
	e := &execution{dl: d}
	e.own.ctx.deadline = at
	d.add(e)
	return e
}

func TestDeadlinesExpireInOrder(t *testing.T) {
	var d deadlines
	now := time.Now()
	// Made out of order, as two launchers may; one of them settles.
	late := newListed(&d, now.Add(120*time.Millisecond))
	early := newListed(&d, now.Add(40*time.Millisecond))
	settled := newListed(&d, now.Add(20*time.Millisecond))
	never := newListed(&d, now.Add(time.Hour))
	settled.stopDeadline()

	d.mu.Lock()
	order := []*execution{d.head, d.head.dlNext, d.head.dlNext.dlNext}
	inOrder := order[0] == early && order[1] == late && order[2] == never && d.tail == never
	d.mu.Unlock()
	if !inOrder {
		t.Fatal("the list is not in deadline order")
	}
	for _, e := range []*execution{early, late} {
		select {
		case <-e.own.ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a deadline passed and its context did not end")
		}
		if time.Now().Before(e.own.ctx.deadline) {
			t.Error("a context ended before its deadline")
		}
		if e.own.ctx.Err() != context.DeadlineExceeded || context.Cause(&e.own.ctx) != errTimeout {
			t.Errorf("Err %v, Cause %v; want DeadlineExceeded, errTimeout", e.own.ctx.Err(), context.Cause(&e.own.ctx))
		}
	}
	// Past late's deadline, settled's is long past: the timer, had it kept
	// settled, would have expired it before late.
	if settled.own.ctx.Err() != nil || never.own.ctx.Err() != nil {
		t.Error("a settled execution, or one not due, was expired")
	}
	d.mu.Lock()
	left := d.head != never || d.tail != never || never.dlPrev != nil
	d.mu.Unlock()
	if left {
		t.Error("expired executions left in the list")
	}
	never.stopDeadline()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.head != nil || d.tail != nil {
		t.Error("the list is not empty")
	}
}
