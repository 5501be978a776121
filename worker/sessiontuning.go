package worker

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/skiplock/skiplock/internal/sessiontune"
)

// How the lock session (locksession.go) connects: TCP settings that notice
// a dead peer in seconds, and statements cancelled without losing the
// session and its locks.

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

// appName clips an application_name as PostgreSQL would (63 bytes).
func appName(s string) string { return sessiontune.AppName(s) }

// tcp is the TCP part of t, as package sessiontune takes it.
func (t sessionTuning) tcp() sessiontune.TCP {
	return sessiontune.TCP{KeepIdle: t.keepIdle, KeepInterval: t.keepInterval, KeepCount: t.keepCount, UserTimeout: t.userTimeout}
}

// apply returns a copy of config that connects and reacts to cancelled
// statements as the lock session needs.
func (t sessionTuning) apply(config *pgx.ConnConfig) *pgx.ConnConfig {
	config = config.Copy()
	// A dead peer must be noticed in seconds, not after the kernel's two
	// hours: keepalives probe an idle socket, and TCP_USER_TIMEOUT bounds
	// data left unacknowledged (and probes left unanswered).
	config.DialFunc = t.tcp().Dialer().DialContext
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
	config.RuntimeParams["application_name"] = t.appName
	return config
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
