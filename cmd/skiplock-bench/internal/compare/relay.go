package compare

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Relay is a user-space TCP relay that stands for a network between the
// systems and the server: every connection accepted on 127.0.0.1 is
// forwarded to the upstream address, and each chunk of bytes, in each
// direction, is held Delay after it was read before it is written on. A
// round trip through it thus costs about 2*Delay more than a direct one
// (more in practice: the Go runtime's timers wake at about millisecond
// granularity, which is why the compare measures the round trip it gets
// rather than trusting Delay). A Delay of 0 forwards as soon as a chunk is
// read: the relay alone, the baseline for a delayed run. Order is kept per
// direction, and throughput is not limited beyond the copying: the queue of
// a direction holds up to relayQueue chunks in flight.
//
// This machine's kernel has no netem; the relay is how a network round trip
// is simulated.
type Relay struct {
	Delay time.Duration

	ln       net.Listener
	network  string // of the upstream: "tcp" or "unix"
	upstream string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

const (
	relayChunk = 64 << 10
	relayQueue = 1024
)

// StartRelay listens on 127.0.0.1 at a free port and forwards every
// connection to upstream (network "tcp" or "unix").
func StartRelay(network, upstream string, delay time.Duration) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{Delay: delay, ln: ln, network: network, upstream: upstream, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the relay's listening address, host:port.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Close stops listening, closes every relayed connection and waits for the
// relay's goroutines to end.
func (r *Relay) Close() error {
	err := r.ln.Close()
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

func (r *Relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *Relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.conns, c)
	}
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		down, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: try again
			continue
		}
		r.wg.Add(1)
		go r.serve(down)
	}
}

// serve relays one connection: a dial upstream, then a pipe per direction.
func (r *Relay) serve(down net.Conn) {
	defer r.wg.Done()
	up, err := net.DialTimeout(r.network, r.upstream, 10*time.Second)
	if err != nil {
		down.Close()
		return
	}
	if !r.track(down, up) {
		down.Close()
		up.Close()
		return
	}
	for _, c := range []net.Conn{down, up} {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true) //nolint:errcheck // best effort
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.pipe(up, down) }()
	go func() { defer wg.Done(); r.pipe(down, up) }()
	wg.Wait()
	down.Close()
	up.Close()
	r.untrack(down, up)
}

// chunk is what a direction's reader hands its writer: bytes and the time
// they may be written.
type chunk struct {
	due time.Time
	b   []byte
}

// pipe copies src to dst, each chunk Delay after it was read: the reader
// (this goroutine) stamps and queues, a writer goroutine sleeps until a
// chunk is due and writes it, with the chunks behind it that are due by
// then in one writev. At src's end it half-closes dst once the queue is
// written; on an error it closes both.
func (r *Relay) pipe(dst, src net.Conn) {
	q := make(chan chunk, relayQueue)
	werr := make(chan error, 1)
	go func() { werr <- writeDue(dst, src, q) }()
	buf := make([]byte, relayChunk)
	var rerr error
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{due: time.Now().Add(r.Delay), b: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			if err != io.EOF {
				rerr = err
			}
			break
		}
	}
	close(q)
	if err := <-werr; err != nil || rerr != nil {
		src.Close()
		dst.Close()
		return
	}
	if hc, ok := dst.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite() //nolint:errcheck // the peer may be gone already
	} else {
		dst.Close()
	}
}

// writeDue is a direction's writer. After a failed write it closes src, so
// that the reader stops, and drains the queue.
func writeDue(dst, src net.Conn, q <-chan chunk) error {
	var backing [64][]byte // WriteTo consumes bufs; each batch starts here again
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		bufs := append(net.Buffers(backing[:0]), c.b)
	gather:
		for len(bufs) < len(backing) {
			select {
			case n, ok := <-q:
				if !ok {
					break gather
				}
				if time.Until(n.due) > 0 {
					// Not due yet: write what is, then wait for it.
					if _, err := (&bufs).WriteTo(dst); err != nil {
						return drain(src, q, err)
					}
					time.Sleep(time.Until(n.due))
					bufs = backing[:0]
				}
				bufs = append(bufs, n.b)
			default:
				break gather
			}
		}
		if _, err := (&bufs).WriteTo(dst); err != nil {
			return drain(src, q, err)
		}
	}
	return nil
}

func drain(src net.Conn, q <-chan chunk, err error) error {
	src.Close()
	for range q {
	}
	return err
}
