// Package sessiontune connects a session that holds advisory locks so that
// a dead peer is noticed in seconds: TCP keepalives and TCP_USER_TIMEOUT on
// the client's socket, and the same asked of the server (SessionTune in
// sql/workers.sql). Shared by the worker's lock session and package
// worker/lock.
package sessiontune

import (
	"net"
	"strconv"
	"time"
	"unicode/utf8"
)

// TCP is how a socket notices a dead peer. A zero or negative field keeps
// the operating system's setting.
type TCP struct {
	KeepIdle, KeepInterval time.Duration
	KeepCount              int
	UserTimeout            time.Duration
}

// Dialer returns a dialer that sets t on every connection it opens: an idle
// socket is probed after KeepIdle, then every KeepInterval, and dropped
// after KeepCount unanswered probes; data left unacknowledged (and probes
// left unanswered) for UserTimeout drops it too (Linux only).
func (t TCP) Dialer() *net.Dialer {
	return &net.Dialer{
		Timeout: 10 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: t.KeepIdle, Interval: t.KeepInterval, Count: t.KeepCount,
		},
		Control: setUserTimeout(t.UserTimeout),
	}
}

// ServerSettings returns t as the server's settings take them
// (tcp_keepalives_idle, tcp_keepalives_interval, tcp_keepalives_count in
// whole seconds and counts, tcp_user_timeout in milliseconds; "0" keeps
// the system's).
func (t TCP) ServerSettings() (idle, interval, count, userTimeoutMs string) {
	return Seconds(t.KeepIdle), Seconds(t.KeepInterval), strconv.Itoa(max(t.KeepCount, 0)),
		strconv.FormatInt(max(t.UserTimeout.Milliseconds(), 0), 10)
}

// AppName clips an application_name as PostgreSQL would (63 bytes), on a
// rune boundary.
func AppName(s string) string {
	for len(s) > 63 {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// Seconds is a duration as the server's whole-second settings take it,
// rounded up; 0 leaves the system's.
func Seconds(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}
