package lock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Errors. Every error of this package wraps one of them, a context's, or
// migrations.ErrNotMigrated when the schema lacks skiplock_locks
// (migration 16).
var (
	// ErrNotAcquired: someone else holds the lock (or a lock whose name
	// shares its key, see Key), and the try ended, or the wait reached its
	// context's deadline.
	ErrNotAcquired = errors.New("skiplock: lock not acquired")
	// ErrLockLost is the cause of a held lock's Context when the lock was
	// lost: its session died or went silent, or a lease expired or was
	// taken over. Release and Renew return it too.
	ErrLockLost = errors.New("skiplock: lock lost")
	// ErrReleased is the cause of a lock's Context after Release.
	ErrReleased = errors.New("skiplock: lock released")
	// ErrClosed is returned by a Client after Close, and is the cause of
	// the Context of the session locks it held.
	ErrClosed = errors.New("skiplock: lock client closed")
	// ErrInvalid is wrapped by the errors of bad arguments: an empty name,
	// a lease TTL too short, a bad option.
	ErrInvalid = errors.New("skiplock: invalid lock argument")
)

// Limits and defaults.
const (
	// MaxNameBytes is the longest name, in bytes of UTF-8.
	MaxNameBytes = 512
	// MinLeaseTTL is the shortest lease: a renewal must have time to go
	// and come back well within it.
	MinLeaseTTL = time.Second
	// The defaults of the Options fields of the same names.
	defaultKeepaliveInterval = time.Second
	defaultPingTimeout       = 5 * time.Second
	defaultPollInterval      = 250 * time.Millisecond
)

// Mode is how a lock is held.
type Mode int

const (
	// Exclusive: one holder at a time, and no shared holder meanwhile.
	Exclusive Mode = iota
	// Shared: any number of shared holders, and no exclusive one.
	Shared
)

func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Options configure a Client. The zero value is ready to use.
type Options struct {
	// ID names this client to operators: its session's application_name
	// is "skiplock lock " + ID, and its leases' holder is ID. Defaults to
	// "host:pid".
	ID string
	// KeepaliveInterval is how often the session that holds the client's
	// locks is pinged, so that its loss is noticed, and the locks'
	// Contexts ended, within KeepaliveInterval + PingTimeout. Defaults to
	// 1s.
	KeepaliveInterval time.Duration
	// PingTimeout bounds a ping, and any statement on the session: one not
	// answered in time gives the session up, and its locks are lost.
	// Defaults to 5s. The server drops a silent
	// client's session, releasing its locks, after about 11s (TCP
	// keepalives and tcp_user_timeout, asked of it by the session), so
	// keep KeepaliveInterval + PingTimeout below that: the holder then
	// always knows before another can take its lock.
	PingTimeout time.Duration
	// PollInterval is the longest pause between two tries while Acquire
	// or AcquireLease waits (tries start 10ms apart and back off).
	// Defaults to 250ms.
	PollInterval time.Duration
	// ManualRenewal stops leases from renewing themselves: the caller
	// calls Lease.Renew before the lease expires. By default each lease
	// renews itself every third of its TTL until released.
	ManualRenewal bool
	// Logger receives the loss of a session or a lease. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Client takes named locks on skiplock's schema: session locks (Acquire,
// TryAcquire) on a connection of its own, and leases (AcquireLease,
// TryLease) through the pool. Its methods are safe for concurrent use.
type Client struct {
	pool    *pgxpool.Pool
	queries *db.Queries
	opts    Options
	log     *slog.Logger

	regMu      sync.Mutex
	registered map[string]bool // recorded in skiplock_locks

	sess session

	leaseMu      sync.Mutex
	leases       map[*Lease]struct{}
	leasesClosed bool
}

// New returns a Client on pool, whose search_path finds skiplock's schema
// (as for the rest of skiplock). It opens nothing: the session that holds
// locks is opened by the first Acquire. It returns an error wrapping
// ErrInvalid for a bad option.
func New(pool *pgxpool.Pool, opts Options) (*Client, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: lock.New needs a pool", ErrInvalid)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"KeepaliveInterval", &opts.KeepaliveInterval, defaultKeepaliveInterval},
		{"PingTimeout", &opts.PingTimeout, defaultPingTimeout},
		{"PollInterval", &opts.PollInterval, defaultPollInterval},
	} {
		if *d.v < 0 {
			return nil, fmt.Errorf("%w: Options.%s is negative (%s)", ErrInvalid, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if opts.ID == "" {
		host, _ := os.Hostname()
		opts.ID = host + ":" + strconv.Itoa(os.Getpid())
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Client{pool: pool, queries: db.New(), opts: opts, log: opts.Logger, registered: map[string]bool{}, leases: map[*Lease]struct{}{}}
	c.sess.c = c
	return c, nil
}

// ID returns the client's ID (Options.ID).
func (c *Client) ID() string { return c.opts.ID }

// Close releases every lock and lease the client holds and closes its
// session. The Contexts of its session locks end with ErrClosed, its
// leases' with ErrReleased. Later acquisitions return ErrClosed.
func (c *Client) Close() {
	c.closeLeases()
	c.sess.close()
}

// Key returns the key of a name: its 32-bit FNV-1a hash. Locks are held on
// (class, key), class being the OID of skiplock_locks, so two names with
// the same key exclude each other as if they were one (a chance of about
// n²/2³³ among n names in use at once). A lease is held on its name, not
// its key.
func Key(name string) int32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int32(h.Sum32())
}

func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: lock name is empty", ErrInvalid)
	case len(name) > MaxNameBytes:
		return fmt.Errorf("%w: lock name is %d bytes long, over %d", ErrInvalid, len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: lock name %q is not valid UTF-8", ErrInvalid, name)
	}
	for _, r := range name {
		if r == 0 {
			return fmt.Errorf("%w: lock name %q contains a NUL byte", ErrInvalid, name)
		}
	}
	return nil
}

func checkMode(m Mode) error {
	if m != Exclusive && m != Shared {
		return fmt.Errorf("%w: mode %d is neither Exclusive nor Shared", ErrInvalid, int(m))
	}
	return nil
}

// register records name in skiplock_locks through the pool, once per
// client, so that `skiplock locks` can name its key. It runs in the
// background, never delaying a lock: the insert waits while a transaction
// that recorded the same name (InTx) is open.
func (c *Client) register(ctx context.Context, name string, key int32) {
	c.regMu.Lock()
	done := c.registered[name]
	if !done {
		if len(c.registered) >= 10000 {
			clear(c.registered)
		}
		c.registered[name] = true
	}
	c.regMu.Unlock()
	if done {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err := c.queries.LockNameRegister(ctx, c.pool, db.LockNameRegisterParams{Name: name, Key: key})
		if err != nil {
			c.regMu.Lock()
			delete(c.registered, name)
			c.regMu.Unlock()
			c.log.Warn("skiplock: recording a lock's name for `skiplock locks`", "name", name, "error", pgerr.Interpret(err))
		}
	}()
}

// poll calls try until it acquires, fails with an error other than
// ErrNotAcquired, or ctx ends, pausing 10ms and then longer, up to
// PollInterval. what names the lock in errors: `lock "x"`.
func (c *Client) poll(ctx context.Context, what string, try func() error) error {
	pause := 10 * time.Millisecond
	for {
		err := try()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return waitEnded(ctx, what)
		}
		if !errors.Is(err, ErrNotAcquired) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return waitEnded(ctx, what)
		case <-t.C:
		}
		pause = min(pause*2, c.opts.PollInterval)
	}
}

// waitEnded is the error of a wait whose context ended first. At the
// context's deadline it wraps ErrNotAcquired and ctx.Err() (and the
// context's cause), as a timeout would; cancelled, it wraps the cause.
func waitEnded(ctx context.Context, what string) error {
	cause := context.Cause(ctx)
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: waiting: %w", what, cause)
	}
	errs := []error{ErrNotAcquired, ctx.Err()}
	if cause != ctx.Err() {
		errs = append(errs, cause)
	}
	return &waitError{msg: fmt.Sprintf("%v: %s was not free before the context's deadline: %v", ErrNotAcquired, what, cause), errs: errs}
}

type waitError struct {
	msg  string
	errs []error
}

func (e *waitError) Error() string   { return e.msg }
func (e *waitError) Unwrap() []error { return e.errs }
