package compare

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// TestRelay sends through a relay with a delay to an echo server: a message
// each way arrives no sooner than the delay after it was sent, and 4 MiB
// written in pieces of random sizes, while the echo comes back, return
// intact and in order; the client's half-close reaches the server and the
// server's close comes back.
func TestRelay(t *testing.T) {
	const delay = 20 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type stamp struct {
		got, sent time.Time // the server read the ping, and sent the pong
		err       error
	}
	stamps := make(chan stamp, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			stamps <- stamp{err: err}
			return
		}
		defer c.Close()
		var s stamp
		buf := make([]byte, 4)
		if _, s.err = io.ReadFull(c, buf); s.err == nil {
			s.got = time.Now()
			s.sent = time.Now()
			_, s.err = c.Write([]byte("pong"))
		}
		stamps <- s
		io.Copy(c, c) //nolint:errcheck // echo until the client half-closes
	}()

	relay, err := StartRelay("tcp", ln.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	c, err := net.Dial("tcp", relay.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	sent := time.Now()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	pong := make([]byte, 4)
	if _, err := io.ReadFull(c, pong); err != nil {
		t.Fatal(err)
	}
	got := time.Now()
	s := <-stamps
	if s.err != nil {
		t.Fatal(s.err)
	}
	if string(pong) != "pong" {
		t.Fatalf("got %q, want pong", pong)
	}
	if d := s.got.Sub(sent); d < delay {
		t.Errorf("client to server took %s, want at least %s", d, delay)
	}
	if d := got.Sub(s.sent); d < delay {
		t.Errorf("server to client took %s, want at least %s", d, delay)
	}

	data := make([]byte, 4<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	writeErr := make(chan error, 1)
	go func() {
		rest := data
		for len(rest) > 0 {
			k := min(len(rest), 1+rng.IntN(100_000))
			if _, err := c.Write(rest[:k]); err != nil {
				writeErr <- err
				return
			}
			rest = rest[k:]
		}
		writeErr <- c.(*net.TCPConn).CloseWrite()
	}()
	echo, err := io.ReadAll(c) // until the server, having read EOF, closes
	if err != nil {
		t.Fatal(err)
	}
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(echo, data) {
		i := 0
		for i < min(len(echo), len(data)) && echo[i] == data[i] {
			i++
		}
		t.Fatalf("echo of %d bytes differs from the %d sent, from byte %d", len(echo), len(data), i)
	}
}

// TestRelayClose: Close ends the relayed connections.
func TestRelayClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c) //nolint:errcheck // holds it open
		}
	}()
	relay, err := StartRelay("tcp", ln.Addr().String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", relay.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	// Whether the relay has accepted it yet or not, Close ends it.
	if err := relay.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute)) //nolint:errcheck // a hang fails below
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a relayed connection after Close succeeded")
	}
}
