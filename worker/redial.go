package worker

import (
	"context"
	"errors"
	"net"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/pgerr"
)

// Reconnect pacing (redial): how soon a worker tries again to reach a
// database that went away.
const (
	// redialMin is the wait after a first failed attempt, and after the
	// first attempt that reached a server again.
	redialMin = 100 * time.Millisecond
	// redialMax caps the wait while no server can be reached: a probe
	// (below) notices its return in the meantime.
	redialMax = 5 * time.Second
	// redialAnsweredMax caps the wait while a server answers but refuses
	// (starting up, in recovery, read-only until a promotion completes,
	// too many connections): such states last seconds, and no probe can
	// tell when they end.
	redialAnsweredMax = time.Second
	// probeEvery is how often the addresses are probed while none can be
	// reached, and probeTimeout how long one probe may take.
	probeEvery   = 100 * time.Millisecond
	probeTimeout = time.Second
)

// redial paces the attempts to reach a database that went away: a full
// attempt (connect, authenticate, set up) is followed by a wait that
// doubles from redialMin, so that an outage of minutes does not bring a
// flood of attempts, but the wait ends as soon as the server is back.
// While no server can be reached, a probe dials each address of the
// connection (each host of a multi-host URL) every probeEvery: a TCP (or
// Unix socket) connect, closed at once, which the server neither
// authenticates nor logs. The first probe that gets through ends the wait.
// Once a server answers, even with a refusal, the waits start again from
// redialMin, capped at redialAnsweredMax. After an attempt that a probe let
// through and that still reached no server (a proxy that accepts with no
// server behind it), the next wait is the backoff alone: a listener that
// accepts does not make attempts as frequent as probes.
//
// A redial is used by one goroutine at a time.
type redial struct {
	addrs []probeAddr // nil: no probe, the backoff alone
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)

	wait      time.Duration // before the next attempt; 0 before any failed
	answered  bool          // the last attempt reached a server
	armed     bool          // probe during the next wait
	triggered bool          // the last wait was ended by a probe
}

type probeAddr struct{ network, address string }

// newRedial paces attempts on the hosts of config (nil: no probe).
func newRedial(config *pgconn.Config) *redial {
	r := &redial{}
	if config == nil {
		return r
	}
	add := func(host string, port uint16) {
		network, address := pgconn.NetworkAddress(host, port)
		if a := (probeAddr{network, address}); !slices.Contains(r.addrs, a) {
			r.addrs = append(r.addrs, a)
		}
	}
	add(config.Host, config.Port)
	for _, f := range config.Fallbacks {
		add(f.Host, f.Port)
	}
	r.dial = config.DialFunc
	if r.dial == nil {
		r.dial = (&net.Dialer{}).DialContext
	}
	return r
}

// failed records a failed attempt and sets the next wait.
func (r *redial) failed(err error) {
	reached := pgerr.Code(err) != "" || errors.Is(err, pgconn.ErrReadOnlyConnection) || errors.Is(err, errReadOnly)
	switch {
	case r.wait == 0 || reached && !r.answered:
		// The first failure; or a server back, not ready yet (starting
		// up, a failover's new primary not yet promoted).
		r.wait = redialMin
	case reached:
		r.wait = min(r.wait*2, redialAnsweredMax)
	default:
		r.wait = min(r.wait*2, redialMax)
	}
	r.answered = reached
	r.armed = !reached && !r.triggered
	r.triggered = false
}

// succeeded resets the pacing after an attempt that worked.
func (r *redial) succeeded() {
	*r = redial{addrs: r.addrs, dial: r.dial}
}

// next is the wait before the next attempt, without the probe's shortcut:
// what the log says.
func (r *redial) next() time.Duration { return r.wait }

// sleep waits until the next attempt is due: at once before any failed
// attempt, else when the wait has passed or a probe got through. It returns
// false, at once, when ctx ends.
func (r *redial) sleep(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	timer := time.NewTimer(r.wait)
	defer timer.Stop()
	var tick <-chan time.Time
	if len(r.addrs) > 0 && r.armed {
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-tick:
			if r.probe(ctx) {
				r.triggered = true
				return true
			}
		}
	}
}

// probe reports whether any address accepts a connection.
func (r *redial) probe(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	up := make(chan bool, len(r.addrs))
	for _, a := range r.addrs {
		go func() {
			conn, err := r.dial(ctx, a.network, a.address)
			if err == nil {
				conn.Close()
			}
			up <- err == nil
		}()
	}
	for range r.addrs {
		if <-up {
			cancel() // the others need not finish
			return true
		}
	}
	return false
}
