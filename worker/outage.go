package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/pgerr"
)

// outage logs a database that went away, and its return, once per change
// of state rather than once per failed attempt: a failover or a long outage
// makes one line when it starts, one when its error changes (refused, then
// read-only, say) and one when it ends.
type outage struct {
	log  *slog.Logger
	what string // "starting", "claiming tasks"

	mu       sync.Mutex
	since    time.Time // zero: no outage
	kind     string
	failures int
}

// failed records a failed attempt and logs it if it starts an outage or
// changes its kind of error.
func (o *outage) failed(err error, attrs ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failures++
	kind := errorKind(err)
	if !o.since.IsZero() && kind == o.kind {
		return
	}
	if o.since.IsZero() {
		o.since = time.Now()
	}
	o.kind = kind
	attrs = append([]any{"error", err}, attrs...)
	if errors.Is(pgerr.Interpret(err), pgerr.ErrPermissionDenied) {
		// Not an outage: a grant is missing, and retrying waits for it.
		o.log.Warn("skiplock: "+o.what+": permission denied: the worker's database role lacks a grant workers need "+
			"(`skiplock migrate grants --kind worker` prints them); retrying with backoff (logged again when the error "+
			"changes, and when it is back)", attrs...)
		return
	}
	o.log.Warn("skiplock: "+o.what+": the database is not available; retrying with backoff "+
		"(logged again when the error changes, and when it is back)", attrs...)
}

// outageOf is *o, made on first use: for loops that fail seldom, and that
// keep one outage per part (a rescue pass's), made lazily so that their
// structs need no set-up.
func outageOf(o **outage, log *slog.Logger, what string) *outage {
	if *o == nil {
		*o = &outage{log: log, what: what}
	}
	return *o
}

// began records an outage that the caller has logged itself (a lost lock
// session): failures to reach the server that follow are not logged again,
// only a change to another kind of error.
func (o *outage) began() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		o.since, o.kind = time.Now(), "connection"
	}
}

// ok ends an outage, logging how long it lasted. A nil outage (one never
// made by outageOf) has none to end.
func (o *outage) ok() {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		return
	}
	o.log.Info("skiplock: "+o.what+": the database is back", "after", time.Since(o.since).Round(time.Millisecond), "failed_attempts", o.failures)
	o.since, o.kind, o.failures = time.Time{}, "", 0
}

// errorKind tells errors apart for outage: the server's SQLSTATE, a
// read-only server, a timeout, else one kind for every failure to reach the
// server (refused, reset, EOF: which one a dead peer gives is chance), which
// takes in a server that is shutting down or still starting up.
func errorKind(err error) string {
	switch {
	case pgerr.IsServerUnavailable(err):
		return "connection"
	case pgerr.Code(err) != "":
		return pgerr.Code(err)
	case errors.Is(err, errReadOnly):
		return "read-only"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "connection"
}
