package worker

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

var (
	errRefused  = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	errStarting = &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}
)

// freeAddr is a loopback address nothing listens on (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func redialTo(t *testing.T, addr string) *redial {
	t.Helper()
	cfg, err := pgconn.ParseConfig("postgres://u@" + addr + "/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	return newRedial(cfg)
}

// TestRedialWaits: the waits double from redialMin to redialMax while no
// server answers; a server that answers starts them again from redialMin,
// capped at redialAnsweredMax; success resets them.
func TestRedialWaits(t *testing.T) {
	t.Parallel()
	r := redialTo(t, freeAddr(t))
	var waits []time.Duration
	for range 8 {
		r.failed(errRefused)
		waits = append(waits, r.next())
	}
	for range 5 {
		r.failed(errStarting)
		waits = append(waits, r.next())
	}
	r.failed(pgconn.ErrReadOnlyConnection) // answered too: a standby
	waits = append(waits, r.next())
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5000 * ms, 5000 * ms,
		100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms, 1000 * ms}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
	r.succeeded()
	if r.next() != 0 {
		t.Fatalf("after success the first attempt waits %s", r.next())
	}
}

// TestRedialProbe: a wait of redialMax ends when the server's address
// accepts connections, by a probe (not the timer); after an attempt that a probe let through fails
// without reaching a server, the next wait does not probe.
func TestRedialProbe(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	r := redialTo(t, addr)
	for range 10 {
		r.failed(errRefused)
	}
	slept := make(chan bool, 1)
	go func() { slept <- r.sleep(context.Background()) }()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the address was taken meanwhile: %v", err)
	}
	defer l.Close()
	select {
	case ok := <-slept:
		if !ok || !r.triggered {
			t.Fatalf("sleep = %v, triggered by a probe %v", ok, r.triggered)
		}
	case <-time.After(redialMax / 2):
		t.Fatal("the wait did not end when the address accepted connections")
	}

	// A listener that accepts, yet the attempt reaches no server (a proxy
	// with nothing behind it): the next wait is the backoff alone.
	r.failed(errRefused)
	if r.armed {
		t.Fatal("the next wait would probe again: attempts as often as probes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r.sleep(ctx) {
		t.Fatal("sleep with a done context reported an attempt due")
	}
	// A failure of a plain attempt arms the probe again.
	r.failed(errRefused)
	if !r.armed {
		t.Fatal("a plain attempt's failure did not arm the probe")
	}
}
