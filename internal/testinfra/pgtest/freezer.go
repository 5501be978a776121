package pgtest

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Freezer is a TCP proxy to the test server that can go silent: frozen, it
// forwards nothing in either direction and closes nothing, as a network
// partition or a frozen VM would; thawed, it forwards what it held. Its
// kernel still acknowledges packets, so only the application's own checks
// (pings, heartbeats) can tell: TCP settings play no part here. The real
// silence, packets dropped, is the partition test's (internal/systemtest/chaos).
type Freezer struct {
	l      net.Listener
	target string // network address of the server
	netw   string // "tcp" or "unix"

	mu    sync.Mutex
	thaw  chan struct{} // closed while not frozen
	conns []net.Conn
}

// NewFreezer points cfg's connections at a new Freezer, closed when the
// test ends.
func NewFreezer(t testing.TB, cfg *pgxpool.Config) *Freezer {
	t.Helper()
	f := &Freezer{thaw: make(chan struct{}), netw: "tcp", target: net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))}
	close(f.thaw)
	if strings.HasPrefix(cfg.ConnConfig.Host, "/") {
		f.netw, f.target = "unix", cfg.ConnConfig.Host+"/.s.PGSQL."+strconv.Itoa(int(cfg.ConnConfig.Port))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.l = l
	go f.accept()
	t.Cleanup(func() {
		f.Unfreeze()
		l.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			c.Close()
		}
	})
	// Connections through the proxy.
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(l.Addr().(*net.TCPAddr).Port)
	cfg.ConnConfig.Fallbacks = nil
	return f
}

func (f *Freezer) gate() {
	f.mu.Lock()
	ch := f.thaw
	f.mu.Unlock()
	<-ch
}

// Freeze stops forwarding, in both directions, until Unfreeze.
func (f *Freezer) Freeze() {
	f.mu.Lock()
	f.thaw = make(chan struct{})
	f.mu.Unlock()
}

// Unfreeze forwards what was held and what comes next.
func (f *Freezer) Unfreeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thaw:
	default:
		close(f.thaw)
	}
}

func (f *Freezer) accept() {
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		go func() {
			f.gate()
			s, err := net.Dial(f.netw, f.target)
			if err != nil {
				c.Close()
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, s)
			f.mu.Unlock()
			go f.pipe(s, c)
			go f.pipe(c, s)
		}()
	}
}

// pipe forwards src to dst while thawed; a frozen pipe holds what it read,
// and an end that closes is passed on only once thawed.
func (f *Freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		f.gate()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}
