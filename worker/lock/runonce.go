package lock

import (
	"context"
	"errors"
	"fmt"
)

// RunOnce runs fn under the named exclusive session lock if no other
// holder has it, and skips it otherwise: of the nodes that call RunOnce
// for the same name at the same time, one runs fn and the others return
// (false, nil) at once. fn's context ends when ctx does or when the lock
// is lost (its cause then wraps ErrLockLost), and fn should stop then.
//
// It returns whether fn ran, and fn's error; when fn returned nil but the
// lock was lost while it ran (so another node may have run it too), an
// error wrapping ErrLockLost. The lock is released when fn returns, so
// RunOnce does not keep a node that calls it later from running fn again:
// to run a job once a day, say, have fn record the day it ran, and skip a
// day already recorded.
func RunOnce(ctx context.Context, c *Client, name string, fn func(ctx context.Context) error) (ran bool, err error) {
	if c == nil || fn == nil {
		return false, fmt.Errorf("%w: lock.RunOnce needs a client and a function", ErrInvalid)
	}
	l, err := c.TryAcquire(ctx, name, Exclusive)
	if errors.Is(err, ErrNotAcquired) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	err = fn(runCtx)
	stop()
	cancel(nil)
	if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil && err == nil {
		err = rerr
	}
	return true, err
}
