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
		backend, err := s.queries.SessionBackendPID(ctx, customPlans{conn})
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
