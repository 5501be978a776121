package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// errSessionDown is returned by lock session calls while it reconnects.
var errSessionDown = errors.New("lock session is down")

// unlockDelay is how long released task locks may wait for the next claim
// to carry them before they are sent on their own. It only delays a retry's
// re-claim of the same task, never a claim of other work.
const unlockDelay = 2 * time.Millisecond

// lockQueryTimeout bounds one statement on the lock session. A statement that
// takes longer is cancelled with a cancel request, which keeps the session
// and its locks.
const lockQueryTimeout = 30 * time.Second

// errPingTimeout is the cause of a ping's deadline: the session is given up
// at once rather than after a cancel request, which a silent network would
// not carry either.
var errPingTimeout = errors.New("skiplock: lock session ping timed out")

// sessionTuning is how the lock session detects a dead peer; see the
// TCP and PingTimeout fields of Config.
type sessionTuning struct {
	keepIdle, keepInterval time.Duration // <= 0: the system's
	keepCount              int           // <= 0: the system's
	userTimeout            time.Duration // <= 0: the system's
	pingTimeout            time.Duration
	appName                string
}

func (c Config) sessionTuning() sessionTuning {
	return sessionTuning{
		keepIdle: c.TCPKeepaliveIdle, keepInterval: c.TCPKeepaliveInterval, keepCount: c.TCPKeepaliveCount,
		userTimeout: c.TCPUserTimeout, pingTimeout: c.PingTimeout,
		appName: appName("skiplock lock session " + c.WorkerID),
	}
}

// appName clips an application_name as PostgreSQL would (63 bytes), on a
// rune boundary.
func appName(s string) string {
	for len(s) > 63 {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// lockSession is the one connection of a worker process that holds the
// advisory locks of all its running tasks: one session holds any number of
// locks, so concurrency is not capped by the pool. Every statement that
// takes or releases a task lock runs here, serialized by mu.
//
// Each (re)connection is a generation. Locks die with their session, so a
// task claimed in generation g is unlocked only while g is current; after a
// reconnect its lock is gone and unlocking by key could release a lock that
// the new session took for a new claim of the same task.
type lockSession struct {
	config   *pgx.ConnConfig
	queries  *db.Queries
	class    int32 // first key of every task lock: the OID of skiplock_tasks
	classOID int64 // the same, as pg_locks shows it (unsigned)
	tuning   sessionTuning
	log      *slog.Logger
	onLost   func(gen uint64) // called without mu held, once per lost generation
	onUp     func(gen uint64, backendPID uint32)
	// register records the session in skiplock_workers, on the session
	// itself, before it is used.
	register func(ctx context.Context, conn *pgx.Conn, backendPID int32) error

	mu       sync.Mutex
	conn     *pgx.Conn // nil while down
	gen      uint64
	up       chan struct{} // closed while conn is usable
	held     map[int64]int // task id -> locks taken in this generation
	backend  int32         // the server process of this generation
	lastUsed time.Time
	closed   bool
	stop     chan struct{} // closed by close(); ends reconnect attempts

	// Read without mu, by the watchdog: the socket of the current
	// generation, when its last statement began (0: none in flight), and
	// when the server last answered.
	sock      atomic.Pointer[pgconn.PgConn]
	busySince atomic.Int64 // unix nanoseconds
	lastProof atomic.Int64 // unix nanoseconds

	// Locks to release, of the current generation: the next claim carries
	// them, or a flush unlockDelay after the first was queued.
	umu        sync.Mutex
	unlocks    []int64
	unlocksGen uint64
	flushTimer *time.Timer
}

func newLockSession(config *pgx.ConnConfig, class int32, classOID int64, tuning sessionTuning, log *slog.Logger) *lockSession {
	config = config.Copy()
	// A dead peer must be noticed in seconds, not after the kernel's two
	// hours: keepalives probe an idle socket, and TCP_USER_TIMEOUT bounds
	// data left unacknowledged (and probes left unanswered).
	dialer := &net.Dialer{
		Timeout: 10 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: tuning.keepIdle, Interval: tuning.keepInterval, Count: tuning.keepCount,
		},
		Control: setUserTimeout(tuning.userTimeout),
	}
	config.DialFunc = dialer.DialContext
	// pgx's default reaction to a cancelled context is to break the
	// connection, which here would drop every task lock at once. Send a
	// cancel request instead and give up on the socket only if the server
	// does not answer that either; a ping that timed out gives up at once.
	config.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &watchHandler{conn: c, soft: &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 10 * time.Second}}
	}
	if config.RuntimeParams == nil {
		config.RuntimeParams = map[string]string{}
	}
	config.RuntimeParams["application_name"] = tuning.appName
	return &lockSession{
		config:   config,
		queries:  db.New(),
		class:    class,
		classOID: classOID,
		tuning:   tuning,
		log:      log,
		up:       make(chan struct{}),
		held:     map[int64]int{},
		stop:     make(chan struct{}),
	}
}

// watchHandler reacts to a statement's cancelled context: a ping's deadline
// (errPingTimeout) closes the socket at once; anything else sends a cancel
// request, which keeps the session and its locks.
type watchHandler struct {
	conn *pgconn.PgConn
	soft *pgconn.CancelRequestContextWatcherHandler
	hard bool
}

func (h *watchHandler) HandleCancel(ctx context.Context) {
	h.hard = errors.Is(context.Cause(ctx), errPingTimeout)
	if h.hard {
		h.conn.Conn().SetDeadline(time.Now())
		return
	}
	h.soft.HandleCancel(ctx)
}

func (h *watchHandler) HandleUnwatchAfterCancel() {
	if h.hard {
		h.conn.Conn().SetDeadline(time.Time{})
		return
	}
	h.soft.HandleUnwatchAfterCancel()
}

// seconds is a duration as the server's whole-second settings take it; 0
// leaves the system's.
func seconds(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// connect opens the first session; Run fails fast when it cannot.
func (s *lockSession) connect(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, s.config)
	if err != nil {
		return err
	}
	return s.installConn(ctx, conn)
}

func (s *lockSession) installConn(ctx context.Context, conn *pgx.Conn) error {
	backend, err := s.queries.SessionBackendPID(ctx, conn)
	if err == nil {
		t := s.tuning
		err = s.queries.SessionTune(ctx, conn, db.SessionTuneParams{
			KeepaliveIdleSeconds:     seconds(t.keepIdle),
			KeepaliveIntervalSeconds: seconds(t.keepInterval),
			KeepaliveCount:           strconv.Itoa(max(t.keepCount, 0)),
			UserTimeoutMs:            strconv.FormatInt(max(t.userTimeout.Milliseconds(), 0), 10),
		})
	}
	if err == nil && s.register != nil {
		err = s.register(ctx, conn, backend)
	}
	if err != nil {
		conn.Close(context.Background())
		return err
	}
	s.mu.Lock()
	s.backend = backend
	s.conn = conn
	s.sock.Store(conn.PgConn())
	s.lastProof.Store(time.Now().UnixNano())
	s.gen++
	gen := s.gen
	s.held = map[int64]int{}
	s.umu.Lock()
	s.unlocks, s.unlocksGen = nil, gen
	s.umu.Unlock()
	s.lastUsed = time.Now()
	close(s.up)
	onUp := s.onUp
	s.mu.Unlock()
	if onUp != nil {
		onUp(gen, uint32(backend))
	}
	return nil
}

// ready returns a channel that is closed while the session is up.
func (s *lockSession) ready() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up
}

// generation returns the current generation and whether the session is up.
func (s *lockSession) generation() (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen, s.conn != nil
}

// do runs fn on the session. When the statement fails because the session
// is gone, the session is marked down, its generation reported lost, and a
// reconnect started.
func (s *lockSession) do(fn func(ctx context.Context, conn *pgx.Conn, gen uint64) error) error {
	return s.doWithin(lockQueryTimeout, nil, fn)
}

// doWithin is do with a timeout of its own; a cause of errPingTimeout makes
// the timeout close the socket rather than send a cancel request.
func (s *lockSession) doWithin(timeout time.Duration, cause error, fn func(ctx context.Context, conn *pgx.Conn, gen uint64) error) error {
	s.mu.Lock()
	if s.conn == nil {
		s.mu.Unlock()
		return errSessionDown
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), timeout, cause)
	defer cancel()
	s.busySince.Store(time.Now().UnixNano())
	err := fn(ctx, s.conn, s.gen)
	s.busySince.Store(0)
	s.lastUsed = time.Now()
	if err == nil || pgerr.Code(err) != "" {
		s.lastProof.Store(s.lastUsed.UnixNano()) // the server answered
	}
	if err == nil || !s.conn.IsClosed() {
		s.mu.Unlock()
		return err
	}
	lost := s.gen
	s.conn = nil
	s.sock.Store(nil)
	s.up = make(chan struct{})
	closed := s.closed
	s.mu.Unlock()

	if !closed {
		s.log.Error("skiplock: lock session lost; cancelling its running tasks and reconnecting", "error", err)
		if s.onLost != nil {
			s.onLost(lost)
		}
		go s.reconnect()
	}
	return fmt.Errorf("%w: %w", errSessionDown, err)
}

func (s *lockSession) reconnect() {
	backoff := 100 * time.Millisecond
	// One line when reconnecting starts failing and when its error changes,
	// not one per attempt: a failover or a long outage retries for minutes.
	o := &outage{log: s.log, what: "lock session reconnecting"}
	start := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(backoff):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conn, err := pgx.ConnectConfig(ctx, s.config)
		if err == nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				cancel()
				conn.Close(context.Background())
				return
			}
			err = s.installConn(ctx, conn)
		}
		cancel()
		if err == nil {
			o.mu.Lock()
			failures := o.failures
			o.mu.Unlock()
			s.log.Info("skiplock: lock session reconnected", "after", time.Since(start).Round(time.Millisecond), "failed_attempts", failures)
			return
		}
		o.failed(err)
		backoff = min(backoff*2, 5*time.Second)
	}
}

// claim takes tasks as p says and locks each one. It carries the pending
// unlocks with it.
func (s *lockSession) claim(p db.TaskClaimParams) (rows []db.TaskClaimRow, gen uint64, err error) {
	p.LockClass = s.class
	err = s.do(func(ctx context.Context, conn *pgx.Conn, g uint64) error {
		gen = g
		p.UnlockIds = s.takeUnlocks(g)
		rows, err = s.queries.TaskClaim(ctx, customPlans{conn}, p)
		if err != nil {
			return err
		}
		for _, r := range rows {
			s.held[r.ID]++
		}
		return nil
	})
	return rows, gen, err
}

// release queues the locks of tasks claimed in generation gen, whose
// outcomes are written, for release. Locks of an earlier generation died
// with their session and are dropped: releasing them by key could release
// a lock the new session took for a new claim of the same task.
func (s *lockSession) release(ids []int64, gen uint64) {
	s.umu.Lock()
	defer s.umu.Unlock()
	if gen != s.unlocksGen {
		return
	}
	s.unlocks = append(s.unlocks, ids...)
	if s.flushTimer == nil {
		s.flushTimer = time.AfterFunc(unlockDelay, s.flushUnlocks)
	}
}

// takeUnlocks hands the pending unlocks of generation g to a statement
// about to run on the session (mu held), and forgets them as held: should
// the statement fail, reconcile releases whatever is still held.
func (s *lockSession) takeUnlocks(g uint64) []int64 {
	s.umu.Lock()
	ids := s.unlocks
	s.unlocks = nil
	if s.flushTimer != nil {
		s.flushTimer.Stop()
		s.flushTimer = nil
	}
	s.umu.Unlock()
	if s.unlocksGen != g || ids == nil {
		return []int64{}
	}
	for _, id := range ids {
		if s.held[id] <= 1 {
			delete(s.held, id)
		} else {
			s.held[id]--
		}
	}
	return ids
}

// flushUnlocks sends pending unlocks that no claim carried.
func (s *lockSession) flushUnlocks() {
	err := s.do(func(ctx context.Context, conn *pgx.Conn, g uint64) error {
		ids := s.takeUnlocks(g)
		if len(ids) == 0 {
			return nil
		}
		_, err := s.queries.TaskUnlockMany(ctx, conn, db.TaskUnlockManyParams{LockClass: s.class, Ids: ids})
		if err != nil && !conn.IsClosed() {
			// The locks may still be held; reconcile finds out.
			return errors.Join(err, s.reconcileLocked(ctx, conn))
		}
		return err
	})
	if err != nil && !errors.Is(err, errSessionDown) {
		s.log.Warn("skiplock: releasing task locks", "error", err)
	}
}

// reconcile releases task locks the session holds but no claim accounts
// for. A claim statement that fails part way (out of shared memory, a
// cancelled query) has already taken some advisory locks: session locks are
// not transactional, so they outlive the rollback.
func (s *lockSession) reconcile() error {
	return s.do(func(ctx context.Context, conn *pgx.Conn, _ uint64) error {
		return s.reconcileLocked(ctx, conn)
	})
}

// reconcileLocked is reconcile with mu held.
func (s *lockSession) reconcileLocked(ctx context.Context, conn *pgx.Conn) error {
	{
		for range 3 { // a lock taken twice needs two unlocks
			keys, err := s.queries.TaskLocksHeld(ctx, conn, s.classOID)
			if err != nil {
				return err
			}
			expected := make(map[int64]bool, len(s.held))
			for id := range s.held {
				expected[id%(1<<32)] = true
			}
			var extra []int64
			for _, k := range keys {
				if !expected[k] {
					extra = append(extra, k)
				}
			}
			if len(extra) == 0 {
				return nil
			}
			s.log.Warn("skiplock: releasing advisory locks left by a failed claim", "count", len(extra))
			// The key is the low 32 bits of a task id, and so is a valid
			// id for TaskUnlockMany.
			if _, err := s.queries.TaskUnlockMany(ctx, conn, db.TaskUnlockManyParams{LockClass: s.class, Ids: extra}); err != nil {
				return err
			}
		}
		return nil
	}
}

// tryLeader tries to take the session lock that elects one process for a
// maintenance job; it returns the generation the lock lives in.
func (s *lockSession) tryLeader(key int64) (acquired bool, gen uint64, err error) {
	err = s.do(func(ctx context.Context, conn *pgx.Conn, g uint64) error {
		gen = g
		acquired, err = s.queries.LeaderTryLock(ctx, conn, key)
		return err
	})
	return acquired, gen, err
}

// ping checks the session, so that a session the server ended (or a
// network that died) is noticed even while no claim runs: with heartbeat
// set it writes the worker's heartbeat through it, otherwise it pings only
// a session idle for idle. An answer not back within PingTimeout ends the
// session. It also checks that the session is one: behind a transaction
// pooler the server process changes, and with it the locks this session
// believes it holds.
func (s *lockSession) ping(idle time.Duration, heartbeat func(ctx context.Context, conn *pgx.Conn) error) error {
	s.mu.Lock()
	recent := time.Since(s.lastUsed) < idle
	s.mu.Unlock()
	if recent && heartbeat == nil {
		return nil
	}
	return s.doWithin(s.tuning.pingTimeout, errPingTimeout, func(ctx context.Context, conn *pgx.Conn, _ uint64) error {
		if heartbeat != nil {
			return heartbeat(ctx, conn)
		}
		backend, err := s.queries.SessionBackendPID(ctx, conn)
		if err == nil && backend != s.backend {
			s.log.Error(ErrTransactionPooling.Error(), "was", s.backend, "now", backend)
			s.backend = backend
		}
		return err
	})
}

// watchdog gives up a session whose statement in flight has gone without
// any answer from the server for silence: the network, not the server, is
// the likely culprit, and the rescuer will end the server's side of the
// session after StaleAfter anyway. Closing the socket fails the statement,
// which reports the generation lost and reconnects. It never blocks.
func (s *lockSession) watchdog(silence time.Duration) {
	busy := s.busySince.Load()
	sock := s.sock.Load()
	if busy == 0 || sock == nil {
		return
	}
	now := time.Now()
	since := now.Sub(time.Unix(0, max(busy, s.lastProof.Load())))
	if since < silence {
		return
	}
	s.log.Error("skiplock: lock session silent; giving it up", "silent_for", since.Round(time.Millisecond))
	sock.Conn().SetDeadline(now)
}

// close ends the session, releasing every lock it still holds: queued
// unlocks explicitly, so that they are gone when close returns (the server
// releases the rest as the session ends, a moment later).
func (s *lockSession) close() {
	s.flushUnlocks()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stop)
	conn := s.conn
	s.conn = nil
	s.sock.Store(nil)
	s.mu.Unlock()
	if conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Close(ctx)
	}
}
