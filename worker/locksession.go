package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// errSessionDown is returned by lock session calls while it reconnects.
var errSessionDown = errors.New("lock session is down")

// lockQueryTimeout bounds one statement on the lock session. A statement that
// takes longer is cancelled with a cancel request, which keeps the session
// and its locks.
const lockQueryTimeout = 30 * time.Second

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
	// onFreed announces that unlocks of gated tasks (release) have run;
	// wake asks for this worker's claim loops to be woken too (the
	// announcement is not heard by the worker that sends it).
	onFreed func(wake bool)
	// handoffs are the outcomes of tasks that held a place, for the next
	// claim to carry (handoff.go); onCarried accounts for those that a
	// claim wrote. Set before the session is used.
	handoffs  *handoffs
	onCarried func(batch []finish, wrote []int64)
	// register records the session in skiplock_workers, on the session
	// itself, before it is used.
	register func(ctx context.Context, conn *pgx.Conn, backendPID int32) error
	// turns: plain claims wait for their queue's claim turn (ClaimTurn);
	// false with Config.ParallelClaims. Set before the session is used.
	turns bool

	mu   sync.Mutex
	conn *pgx.Conn // nil while down
	gen  uint64
	up   chan struct{} // closed while conn is usable
	held map[int64]int // task id -> locks taken in this generation
	// early are the statements of claims that carry outcomes, prepared
	// on this generation's connection (earlyclaim.go).
	early *earlyStatements
	// heldLimits counts the limit slot locks taken in this generation; a
	// claim never tries them again (a session may take a lock it holds).
	heldLimits map[int32]int
	limitClass int32 // the first key of limit slot locks, from the claims
	backend    int32 // the server process of this generation
	// outcomeCommit is the server's synchronous_commit, which outcome
	// writes that claims carry keep (HandoffSettings).
	outcomeCommit string
	lastUsed      time.Time
	closed        bool
	stop          chan struct{} // closed by close(); ends reconnect attempts

	// Read without mu, by the watchdog: the socket of the current
	// generation, when its last statement began (0: none in flight), and
	// when the server last answered.
	sock      atomic.Pointer[pgconn.PgConn]
	busySince atomic.Int64 // unix nanoseconds
	freeSince atomic.Int64 // unix nanoseconds: when the last statement ended
	lastProof atomic.Int64 // unix nanoseconds
	lastClaim atomic.Int64 // unix nanoseconds: when the last claim ended
	// lostGen is the last generation lost, set before onLost runs: a task
	// of it started after onLost looked at the running ones is cancelled
	// at its start instead (Worker.launch).
	lostGen atomic.Uint64

	// Locks to release, of the current generation: the next claim carries
	// them, or a flush unlockDelay after the first was queued.
	umu        sync.Mutex
	unlocks    []int64
	unlockLims []int32   // limit slot locks released with them
	unlockKeys []string  // exclusive keys their outcomes freed
	unlockFree bool      // some are gated: announce once they have run
	unlocksAt  time.Time // when the first of them was queued
	unlocksGen uint64
	flushTimer *time.Timer
}

func newLockSession(config *pgx.ConnConfig, class int32, classOID int64, tuning sessionTuning, log *slog.Logger) *lockSession {
	config = tuning.apply(config)
	return &lockSession{
		config:     config,
		queries:    db.New(),
		class:      class,
		classOID:   classOID,
		tuning:     tuning,
		log:        log,
		up:         make(chan struct{}),
		held:       map[int64]int{},
		heldLimits: map[int32]int{},
		stop:       make(chan struct{}),
	}
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
	rawJSONB(conn.TypeMap())
	// Unnamed statements: each runs once on this connection (customPlans).
	backend, err := s.queries.SessionBackendPID(ctx, customPlans{conn})
	var outcomeCommit string
	if err == nil {
		var p db.SessionTuneParams
		p.KeepaliveIdleSeconds, p.KeepaliveIntervalSeconds, p.KeepaliveCount, p.UserTimeoutMs = s.tuning.tcp().ServerSettings()
		outcomeCommit, err = s.queries.SessionTune(ctx, customPlans{conn}, p)
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
	s.outcomeCommit = outcomeCommit
	s.conn = conn
	s.sock.Store(conn.PgConn())
	s.lastProof.Store(time.Now().UnixNano())
	s.gen++
	gen := s.gen
	s.held = map[int64]int{}
	s.early = &earlyStatements{byText: map[string]*pgconn.StatementDescription{}}
	s.heldLimits = map[int32]int{}
	s.umu.Lock()
	s.unlocks, s.unlockLims, s.unlockKeys, s.unlocksGen = nil, nil, nil, gen
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
	s.lastUsed = time.Now()
	s.freeSince.Store(s.lastUsed.UnixNano())
	s.busySince.Store(0)
	if err == nil || pgerr.Code(err) != "" {
		s.lastProof.Store(s.lastUsed.UnixNano()) // the server answered
	}
	if err == nil || !s.conn.IsClosed() {
		s.mu.Unlock()
		return err
	}
	lost := s.gen
	s.lostGen.Store(lost)
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

// reconnect opens a new session, as soon as the server can be reached
// again (redial), until it succeeds or the session is closed.
func (s *lockSession) reconnect() {
	// The loss has been logged; the next line is the return, unless the
	// error changes meanwhile (refused, then starting up, say): a failover
	// or a long outage retries for minutes.
	o := &outage{log: s.log, what: "lock session reconnecting"}
	o.began()
	r := newRedial(&s.config.Config)
	stopped, cancelStopped := context.WithCancel(context.Background())
	defer cancelStopped()
	go func() {
		select {
		case <-s.stop:
			cancelStopped()
		case <-stopped.Done():
		}
	}()
	start := time.Now()
	for {
		if !r.sleep(stopped) {
			return
		}
		ctx, cancel := context.WithTimeout(stopped, 10*time.Second)
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
		if stopped.Err() != nil {
			return
		}
		o.failed(err)
		r.failed(err)
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

// close ends the session, releasing every lock it still holds before it
// returns, with one statement: queued unlocks (which no claim will carry
// now), the locks of tasks a stopping worker claimed and did not start,
// and its limit blocks. Left to the end of the session, they are released
// a moment after close returns, as the server notices; a look at pg_locks
// right after a worker stopped saw 6 of them. Places it held are then
// announced free, as an unlock statement would.
func (s *lockSession) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stop)
	conn := s.conn
	freed := false
	if conn != nil {
		_, _, _, freed, _ = s.takeUnlocks(s.gen)
		freed = freed || len(s.heldLimits) > 0
	}
	s.conn = nil
	s.sock.Store(nil)
	s.mu.Unlock()
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// No statement can be running: do holds mu through its statement, and
	// the session is no longer there for it to take. A failure leaves the
	// locks to the end of the session, which frees them all the same.
	_ = s.queries.LockSessionReleaseAll(ctx, customPlans{conn})
	conn.Close(ctx)
	if freed {
		s.announceFreed(false) // the worker is stopping
	}
}

// rawJSONB has the session copy jsonb into a json.RawMessage as it comes:
// pgx otherwise runs json.Unmarshal over the payload and metadata of every
// task a claim returns, only to check JSON that PostgreSQL has already
// checked (5% of the worker's CPU in a 200,000-task profile).
func rawJSONB(m *pgtype.Map) {
	m.RegisterType(&pgtype.Type{Name: "jsonb", OID: pgtype.JSONBOID, Codec: &pgtype.JSONBCodec{Marshal: json.Marshal, Unmarshal: unmarshalRaw}})
}

func unmarshalRaw(data []byte, v any) error {
	if raw, ok := v.(*json.RawMessage); ok {
		*raw = append(json.RawMessage(nil), data...)
		return nil
	}
	return json.Unmarshal(data, v)
}
