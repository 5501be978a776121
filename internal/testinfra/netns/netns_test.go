package netns

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// TestBlackholeAndHeal: a client in the namespace reaches a listener on
// this side; once blackholed it does not (its connect times out: nothing
// answers, not even a reset); healed, it does again.
func TestBlackholeAndHeal(t *testing.T) {
	h, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if !h.Local.Contains(h.Remote.Addr()) || h.Local.Addr() == h.Remote.Addr() {
		t.Fatalf("addresses %s and %s are not two ends of one network", h.Local, h.Remote)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(h.Local.Addr().String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	accepted := make(chan struct{}, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	dial := func() error {
		// bash's /dev/tcp: a connect from inside the namespace, bounded.
		return h.Command("timeout", "3", "bash", "-c", "exec 3<>/dev/tcp/"+h.Local.Addr().String()+"/"+port).Run()
	}
	// waitAccepted checks the listener's side of the last dial: after one
	// that connected, its accept, however busy the machine; after one that
	// timed out, no accept in the moment after it.
	waitAccepted := func(want bool) {
		t.Helper()
		wait := 100 * time.Millisecond
		if want {
			wait = 10 * time.Second
		}
		select {
		case <-accepted:
			if !want {
				t.Fatal("a connection got through the blackhole")
			}
		case <-time.After(wait):
			if want {
				t.Fatalf("the connection was not accepted within %s", wait)
			}
		}
	}

	if err := dial(); err != nil {
		t.Fatalf("connect from the namespace before the cut: %v", err)
	}
	waitAccepted(true)
	if err := h.Blackhole(); err != nil {
		t.Fatal(err)
	}
	if err := dial(); err == nil {
		t.Fatal("connect from the blackholed namespace succeeded")
	}
	waitAccepted(false)
	if err := h.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := dial(); err != nil {
		t.Fatalf("connect after the heal: %v", err)
	}
	waitAccepted(true)
}
