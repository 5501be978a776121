package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/sessiontune"
)

// tcp is how the session's socket, and the server's end of it, notice a
// dead peer: the server gives up on a silent client after about
// 5 + 2×3 s of unanswered keepalives, or 10 s of unacknowledged data.
var tcp = sessiontune.TCP{KeepIdle: 5 * time.Second, KeepInterval: 2 * time.Second, KeepCount: 3, UserTimeout: 10 * time.Second}

// Lock is a session lock the client holds. Its Context ends when the lock
// is released (cause ErrReleased) or lost (cause wrapping ErrLockLost).
type Lock struct {
	c      *Client
	name   string
	key    int32
	mode   Mode
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Mode returns how the lock is held.
func (l *Lock) Mode() Mode { return l.mode }

// Context returns a context that ends when the lock is released or lost:
// work done under the lock should use it (or stop when it ends). Its
// cause (context.Cause) wraps ErrLockLost when the session that held the
// lock died, failed a ping or went silent for PingTimeout, and is
// ErrReleased after Release and ErrClosed after Client.Close. It carries
// the values of the context given to Acquire, not its cancellation.
func (l *Lock) Context() context.Context { return l.ctx }

// Release releases the lock. It returns nil once released (and for a
// second Release), or an error wrapping ErrLockLost when the lock had been
// lost before: work done under it may then have overlapped another
// holder's. It runs even when ctx has ended, bounded by PingTimeout.
func (l *Lock) Release(ctx context.Context) error {
	return l.c.sess.release(l)
}

// session is the connection that holds a client's session locks: one for
// any number of locks, opened by the first Acquire, pinged every
// KeepaliveInterval. Statements run one at a time, under mu.
type session struct {
	c *Client

	mu     sync.Mutex
	conn   *pgx.Conn // nil until connected, and once lost
	closed bool
	stop   chan struct{} // ends the pinger of conn
	holds  map[int32]*holds
	locks  map[*Lock]struct{}
}

// holds counts this process's holds of one key: the server lets a session
// take a lock it holds again, so the client excludes its own holders.
type holds struct {
	exclusive bool
	shared    int
}

// TryAcquire takes the named lock in mode if no other holder has it (in
// this process or any other), without waiting; otherwise it returns an
// error wrapping ErrNotAcquired. The lock is held by the client's session
// until Release, Client.Close, or the session's end: a process that dies
// or is cut off from the server loses its locks (see Lock.Context).
func (c *Client) TryAcquire(ctx context.Context, name string, mode Mode) (*Lock, error) {
	if err := check(name, mode); err != nil {
		return nil, err
	}
	return c.sess.try(ctx, name, mode)
}

// Acquire takes the named lock in mode, waiting while others hold it
// until ctx ends: bound the wait with context.WithTimeout. At ctx's
// deadline the error wraps both ErrNotAcquired and
// context.DeadlineExceeded; cancelled, it wraps ctx's cause. See
// TryAcquire.
func (c *Client) Acquire(ctx context.Context, name string, mode Mode) (*Lock, error) {
	if err := check(name, mode); err != nil {
		return nil, err
	}
	var l *Lock
	err := c.poll(ctx, fmt.Sprintf("lock %q", name), func() (err error) {
		l, err = c.sess.try(ctx, name, mode)
		return err
	})
	return l, err
}

func check(name string, mode Mode) error {
	if err := checkName(name); err != nil {
		return err
	}
	return checkMode(mode)
}

func (s *session) try(ctx context.Context, name string, mode Mode) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock %q: %w", name, context.Cause(ctx))
	}
	key := Key(name)
	s.c.register(ctx, name, key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if h := s.holds[key]; h != nil && (h.exclusive || mode == Exclusive && h.shared > 0) {
		return nil, fmt.Errorf("%w: lock %q (%s) is held by this client", ErrNotAcquired, name, mode)
	}
	if s.conn == nil {
		if err := s.connect(ctx); err != nil {
			return nil, fmt.Errorf("lock %q: opening the lock session: %w", name, err)
		}
	}
	var got bool
	err := s.exec(func(ctx context.Context, conn *pgx.Conn) (err error) {
		got, err = s.c.queries.LockSessionTry(ctx, conn, db.LockSessionTryParams{Shared: mode == Shared, Key: key})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lock %q: %w", name, err)
	}
	if !got {
		return nil, fmt.Errorf("%w: lock %q (%s) is held by another session", ErrNotAcquired, name, mode)
	}
	h := s.holds[key]
	if h == nil {
		h = &holds{}
		s.holds[key] = h
	}
	if mode == Exclusive {
		h.exclusive = true
	} else {
		h.shared++
	}
	l := &Lock{c: s.c, name: name, key: key, mode: mode}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	s.locks[l] = struct{}{}
	return l, nil
}

func (s *session) release(l *Lock) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.locks[l]; !ok {
		if cause := context.Cause(l.ctx); !errors.Is(cause, ErrReleased) {
			return fmt.Errorf("releasing lock %q: %w", l.name, cause)
		}
		return nil
	}
	err := s.exec(func(ctx context.Context, conn *pgx.Conn) error {
		_, err := s.c.queries.LockSessionRelease(ctx, conn, db.LockSessionReleaseParams{Shared: l.mode == Shared, Key: l.key})
		return err
	})
	if _, ok := s.locks[l]; !ok { // lost with the session meanwhile
		return fmt.Errorf("releasing lock %q: %w", l.name, context.Cause(l.ctx))
	}
	s.forget(l)
	l.cancel(ErrReleased)
	if err != nil {
		return fmt.Errorf("releasing lock %q: %w", l.name, err)
	}
	return nil
}

// forget drops l from the holds of the session; mu held.
func (s *session) forget(l *Lock) {
	delete(s.locks, l)
	h := s.holds[l.key]
	if h == nil {
		return
	}
	if l.mode == Exclusive {
		h.exclusive = false
	} else {
		h.shared--
	}
	if !h.exclusive && h.shared <= 0 {
		delete(s.holds, l.key)
	}
}

// connect opens the session; mu held.
func (s *session) connect(ctx context.Context) error {
	cfg := s.c.pool.Config().ConnConfig.Copy()
	cfg.DialFunc = tcp.Dialer().DialContext
	// A statement past its deadline breaks the connection (pgx's default,
	// set again in case the pool's config changed it): an unanswered
	// session is a lost one.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = sessiontune.AppName("skiplock lock " + s.c.opts.ID)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second+s.c.opts.PingTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return pgerr.Interpret(err)
	}
	var p db.SessionTuneParams
	p.KeepaliveIdleSeconds, p.KeepaliveIntervalSeconds, p.KeepaliveCount, p.UserTimeoutMs = tcp.ServerSettings()
	if _, err := s.c.queries.SessionTune(cctx, conn, p); err != nil {
		conn.Close(context.Background())
		return pgerr.Interpret(err)
	}
	s.conn = conn
	s.stop = make(chan struct{})
	s.holds = map[int32]*holds{}
	s.locks = map[*Lock]struct{}{}
	go s.keepalive(conn, s.stop)
	return nil
}

// exec runs fn on the session within PingTimeout; mu held. A failure that
// closed the connection loses the session and every lock on it.
func (s *session) exec(fn func(ctx context.Context, conn *pgx.Conn) error) error {
	if s.conn == nil {
		return fmt.Errorf("%w: the lock session is down", ErrLockLost)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.c.opts.PingTimeout)
	defer cancel()
	err := fn(ctx, s.conn)
	if err != nil && s.conn.IsClosed() {
		s.lose(err)
	}
	return pgerr.Interpret(err)
}

// lose gives the session up: its locks' Contexts end with ErrLockLost;
// mu held. The next Acquire opens a new session.
func (s *session) lose(cause error) {
	if s.conn == nil {
		return
	}
	n := len(s.locks)
	s.drop(fmt.Errorf("%w: the session holding it ended: %w", ErrLockLost, cause))
	if n > 0 {
		s.c.log.Error("skiplock: lock session lost; its locks are lost", "locks", n, "error", cause)
	}
}

// drop closes the session, ending its locks' Contexts with cause; mu held.
func (s *session) drop(cause error) {
	close(s.stop)
	for l := range s.locks {
		l.cancel(cause)
	}
	s.locks, s.holds = nil, nil
	conn := s.conn
	s.conn = nil
	// Closed in the background: over a silent network the goodbye would
	// wait; the socket's deadline makes it short.
	conn.PgConn().Conn().SetDeadline(time.Now().Add(time.Second))
	go conn.Close(context.Background())
}

// keepalive pings conn every KeepaliveInterval until stop is closed; a
// ping that fails or goes unanswered for PingTimeout loses the session.
func (s *session) keepalive(conn *pgx.Conn, stop chan struct{}) {
	tick := time.NewTicker(s.c.opts.KeepaliveInterval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		if s.conn != conn {
			s.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.c.opts.PingTimeout)
		err := conn.Ping(ctx)
		cancel()
		if err != nil {
			s.lose(fmt.Errorf("ping: %w", err))
		}
		s.mu.Unlock()
	}
}

// close releases every lock and closes the session.
func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.conn == nil {
		return
	}
	if len(s.locks) > 0 {
		_ = s.exec(func(ctx context.Context, conn *pgx.Conn) error {
			return s.c.queries.LockSessionReleaseAll(ctx, conn)
		})
	}
	if s.conn != nil {
		s.drop(ErrClosed)
	}
}
