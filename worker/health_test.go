package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
)

// sessionEvents is an Observer that passes on lock session events.
type sessionEvents struct {
	NopObserver
	lost        chan int // handlers cancelled
	reconnected chan struct{}
}

func (o *sessionEvents) LockSessionLost(cancelled int) {
	select {
	case o.lost <- cancelled:
	default:
	}
}

func (o *sessionEvents) LockSessionReconnected() {
	select {
	case o.reconnected <- struct{}{}:
	default:
	}
}

// TestSessionHealth: the health job alone keeps the worker's heartbeat
// fresh through the lock session, and notices when the server ends the
// session: it cancels the handlers of the tasks locked in it with
// errLockLost, reports the loss, and the session comes back registered
// under its new server process.
func TestSessionHealth(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	var held []*execution // set before the job starts
	cancels := make(chan error, 1)
	d := b.deps(t, "w1", ModeAdvisory, func() []*execution { return held }, func(e *execution, cause error) {
		select {
		case cancels <- cause:
		default:
		}
	})
	// An idle session is pinged every 20 ms; the heartbeat goes every
	// StaleAfter/5 = 500 ms.
	d.cfg.HealthInterval, d.cfg.PingTimeout, d.cfg.StaleAfter = 20*time.Millisecond, time.Second, 2500*time.Millisecond
	events := &sessionEvents{lost: make(chan int, 1), reconnected: make(chan struct{}, 1)}
	d.cfg.Observer = events
	g := b.openAdvisory(t, d)
	rows, gen := b.claimGen(t, g, "w1", 1)
	e := executionOf(rows[0])
	e.gen = gen
	held = []*execution{e}
	b.exec(t, "UPDATE skiplock_workers SET heartbeat_at = now() - interval '1 hour' WHERE id = 'w1'")

	jobs := g.jobs()
	if len(jobs) != 1 {
		t.Fatalf("advisory guard has %d jobs, want the session health alone", len(jobs))
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go jobs[0](ctx)

	pgtest.Eventually(t, time.Second, "a heartbeat through the lock session", func() bool {
		var fresh bool
		err := b.pool.QueryRow(ctx, "SELECT heartbeat_at > now() - interval '1 minute' FROM skiplock_workers WHERE id = 'w1'").Scan(&fresh)
		return err == nil && fresh
	})
	first := b.lockBackend(t, "w1")
	b.exec(t, "SELECT pg_terminate_backend($1)", first)
	if cause := waitFor(t, cancels, "the handler's cancellation"); !errors.Is(cause, errLockLost) {
		t.Fatalf("handler cancelled with %v, want errLockLost", cause)
	}
	if n := waitFor(t, events.lost, "the loss reported"); n != 1 {
		t.Errorf("loss reported with %d handlers cancelled, want 1", n)
	}
	waitFor(t, events.reconnected, "the session reconnected")
	if now := b.lockBackend(t, "w1"); now == first || now == 0 {
		t.Errorf("worker row names lock backend %d after reconnecting, want a new one (was %d)", now, first)
	}
}
