package worker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// sessionHealth proves the lock session every interval (HealthInterval),
// so that its loss is noticed, and its tasks' handlers cancelled, within
// HealthInterval + PingTimeout: it pings the session when idle and writes
// the worker's heartbeat through it every heartbeatEvery (StaleAfter/5),
// each bounded by PingTimeout; so within StaleAfter/5 + PingTimeout <= 0.7
// × StaleAfter whatever HealthInterval is.
//
// The ping runs in a goroutine of its own, so that a statement stuck on the
// session never stops the watchdog, which gives up a session whose
// statement in flight has had no answer for StaleAfter/2 (or 3 ×
// PingTimeout when StaleAfter is off).
type sessionHealth struct {
	ls          *lockSession
	interval    time.Duration
	pingTimeout time.Duration
	staleAfter  time.Duration
	beat        func(ctx context.Context, conn *pgx.Conn) error // the heartbeat
}

func (h *sessionHealth) run(ctx context.Context) {
	every := heartbeatEvery(h.staleAfter)
	// The heartbeat keeps its pace whatever the interval is: a worker that
	// pinged hourly must not look cut off.
	tick := time.NewTicker(min(h.interval, every))
	defer tick.Stop()
	silence := 3 * h.pingTimeout
	if h.staleAfter > 0 {
		silence = max(h.staleAfter/2, h.interval+h.pingTimeout)
	}
	var pinging atomic.Bool
	var lastBeat time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		h.ls.watchdog(silence)
		if !pinging.CompareAndSwap(false, true) {
			continue // the last ping waits behind a statement in flight
		}
		var beat func(ctx context.Context, conn *pgx.Conn) error
		if time.Since(lastBeat) >= every {
			lastBeat = time.Now()
			beat = h.beat
		}
		go func() {
			defer pinging.Store(false)
			_ = h.ls.ping(h.interval, beat)
		}()
	}
}
