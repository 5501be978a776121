package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Lease is a lease lock: a row of skiplock_locks that names its holder
// until it expires, for callers that cannot keep a session to the server
// (a transaction pooler such as PgBouncer between them). Every statement
// goes through the pool, one at a time. Its Context ends when the lease
// is released (cause ErrReleased) or lost (cause wrapping ErrLockLost):
// not renewed in time, or taken over.
type Lease struct {
	c      *Client
	name   string
	key    int32
	ttl    time.Duration
	token  int64
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time   // this process's view of the expiry
	timer    *time.Timer // ends the lease at deadline
	done     bool        // released or lost
	stop     chan struct{}
}

// Name returns the lease's name.
func (l *Lease) Name() string { return l.name }

// Token returns the lease's fencing token: a number given by the database
// with each acquisition, greater than every token given before for any
// name of the schema. Pass it with every write the lease guards, and have
// the guarded resource refuse a token lower than the highest it has seen:
// a holder that was paused past its lease (a long GC pause, a frozen VM)
// is then refused instead of overwriting its successor's work.
func (l *Lease) Token() int64 { return l.token }

// TTL returns how long the lease lasts past each acquisition or renewal.
func (l *Lease) TTL() time.Duration { return l.ttl }

// ExpiresAt returns when the lease ends unless renewed, on this process's
// clock: the TTL counted from when the last successful acquisition or
// renewal was sent, so never later than the database's expiry.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Context returns a context that ends when the lease is released or lost:
// at ExpiresAt unless renewed, or as soon as a renewal finds it taken
// over. Its cause wraps ErrLockLost when lost, and is ErrReleased after
// Release. It carries the values of the context given to the acquisition,
// not its cancellation.
func (l *Lease) Context() context.Context { return l.ctx }

// TryLease takes the named lease for ttl (at least MinLeaseTTL) if nobody
// holds it or its holder's lease expired, with a new fencing token;
// otherwise it returns an error wrapping ErrNotAcquired that names the
// holder. Unless Options.ManualRenewal is set, the lease renews itself
// every ttl/3 until Release or Client.Close. Lease names are apart from
// session lock names: a lease and a session lock of the same name do not
// exclude each other.
func (c *Client) TryLease(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	if err := checkLease(name, ttl); err != nil {
		return nil, err
	}
	return c.tryLease(ctx, name, ttl)
}

// AcquireLease is TryLease waiting while another holds the lease, until
// ctx ends: bound the wait with context.WithTimeout. At ctx's deadline
// the error wraps both ErrNotAcquired and context.DeadlineExceeded;
// cancelled, it wraps ctx's cause.
func (c *Client) AcquireLease(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	if err := checkLease(name, ttl); err != nil {
		return nil, err
	}
	var l *Lease
	err := c.poll(ctx, fmt.Sprintf("lease %q", name), func() (err error) {
		l, err = c.tryLease(ctx, name, ttl)
		return err
	})
	return l, err
}

func checkLease(name string, ttl time.Duration) error {
	if err := checkName(name); err != nil {
		return err
	}
	if ttl < MinLeaseTTL {
		return fmt.Errorf("%w: lease TTL %s is shorter than the minimum %s", ErrInvalid, ttl, MinLeaseTTL)
	}
	return nil
}

func (c *Client) tryLease(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	key := Key(name)
	sent := time.Now()
	row, err := c.queries.LockLeaseAcquire(ctx, c.pool, db.LockLeaseAcquireParams{
		Name: name, Key: key, Holder: c.opts.ID, TtlMs: ttl.Milliseconds(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		h, herr := c.queries.LockLeaseHolder(ctx, c.pool, name)
		if herr != nil {
			return nil, fmt.Errorf("%w: lease %q is held by another holder", ErrNotAcquired, name)
		}
		return nil, fmt.Errorf("%w: lease %q is held by %q (token %d) for another %s", ErrNotAcquired, name, h.Holder, h.Token,
			time.Duration(h.ExpiresInSeconds*float64(time.Second)).Round(time.Millisecond))
	}
	if err != nil {
		return nil, fmt.Errorf("lease %q: %w", name, pgerr.Interpret(err))
	}
	l := &Lease{c: c, name: name, key: key, ttl: ttl, token: row.Token, deadline: sent.Add(ttl), stop: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	l.mu.Lock()
	l.timer = time.AfterFunc(time.Until(l.deadline), l.expired)
	l.mu.Unlock()
	if !c.addLease(l) {
		_ = l.Release(context.Background())
		return nil, ErrClosed
	}
	if !c.opts.ManualRenewal {
		go l.renewLoop()
	}
	return l, nil
}

// expired ends a lease whose deadline passed without a renewal.
func (l *Lease) expired() {
	l.mu.Lock()
	late := !l.done && !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if late {
		l.lose(fmt.Errorf("%w: lease %q (token %d) expired: not renewed within its TTL of %s", ErrLockLost, l.name, l.token, l.ttl))
	}
}

func (l *Lease) lose(cause error) {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.finish()
	l.mu.Unlock()
	l.cancel(cause)
	l.c.log.Error("skiplock: lease lost", "name", l.name, "token", l.token, "error", cause)
}

// finish stops the timer and the renewer; mu held.
func (l *Lease) finish() {
	l.done = true
	l.timer.Stop()
	close(l.stop)
	l.c.dropLease(l)
}

// Renew extends the lease by its TTL, from now. It returns an error
// wrapping ErrLockLost when the lease expired or another holder took it
// (its Context has then ended), and another error when the database could
// not be asked: the lease then still ends at ExpiresAt.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	if done {
		return fmt.Errorf("renewing lease %q: %w", l.name, context.Cause(l.ctx))
	}
	sent := time.Now()
	_, err := l.c.queries.LockLeaseRenew(ctx, l.c.pool, db.LockLeaseRenewParams{
		Name: l.name, Holder: l.c.opts.ID, Token: l.token, TtlMs: l.ttl.Milliseconds(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		cause := fmt.Errorf("%w: lease %q (token %d) expired or was taken over", ErrLockLost, l.name, l.token)
		l.lose(cause)
		return fmt.Errorf("renewing lease %q: %w", l.name, context.Cause(l.ctx))
	}
	if err != nil {
		return fmt.Errorf("renewing lease %q: %w", l.name, pgerr.Interpret(err))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return fmt.Errorf("renewing lease %q: %w", l.name, context.Cause(l.ctx))
	}
	if d := sent.Add(l.ttl); d.After(l.deadline) {
		l.deadline = d
		l.timer.Reset(time.Until(d))
	}
	return nil
}

// renewLoop renews every TTL/3, and after a failure every TTL/10, until
// the lease ends.
func (l *Lease) renewLoop() {
	wait := l.ttl / 3
	for {
		t := time.NewTimer(wait)
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
		err := l.Renew(ctx)
		cancel()
		switch {
		case err == nil:
			wait = l.ttl / 3
		case errors.Is(err, ErrLockLost):
			return
		default:
			l.c.log.Warn("skiplock: renewing a lease failed; trying again", "name", l.name, "token", l.token,
				"expires_in", time.Until(l.ExpiresAt()).Round(time.Millisecond), "error", err)
			wait = l.ttl / 10
		}
	}
}

// Release ends the lease at once, so that another may take it without
// waiting for its expiry. It returns nil once released (and for a second
// Release), an error wrapping ErrLockLost when the lease had been lost
// before (work done under it may have overlapped another holder's), or
// another error when the database could not be asked: the lease then
// expires on its own, unrenewed.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		if cause := context.Cause(l.ctx); !errors.Is(cause, ErrReleased) {
			return fmt.Errorf("releasing lease %q: %w", l.name, cause)
		}
		return nil
	}
	l.finish()
	l.mu.Unlock()
	n, err := l.c.queries.LockLeaseRelease(ctx, l.c.pool, db.LockLeaseReleaseParams{Name: l.name, Holder: l.c.opts.ID, Token: l.token})
	switch {
	case err != nil:
		l.cancel(ErrReleased)
		return fmt.Errorf("releasing lease %q: %w", l.name, pgerr.Interpret(err))
	case n == 0:
		cause := fmt.Errorf("%w: lease %q (token %d) had been taken over", ErrLockLost, l.name, l.token)
		l.cancel(cause)
		return fmt.Errorf("releasing lease %q: %w", l.name, cause)
	}
	l.cancel(ErrReleased)
	return nil
}

// The client's live leases, released by Close.

func (c *Client) addLease(l *Lease) bool {
	c.leaseMu.Lock()
	defer c.leaseMu.Unlock()
	if c.leasesClosed {
		return false
	}
	c.leases[l] = struct{}{}
	return true
}

func (c *Client) dropLease(l *Lease) {
	c.leaseMu.Lock()
	delete(c.leases, l)
	c.leaseMu.Unlock()
}

func (c *Client) closeLeases() {
	c.leaseMu.Lock()
	c.leasesClosed = true
	leases := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		leases = append(leases, l)
	}
	c.leaseMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, l := range leases {
		_ = l.Release(ctx)
	}
}

func (c *Client) isClosed() bool {
	c.leaseMu.Lock()
	defer c.leaseMu.Unlock()
	return c.leasesClosed
}
