package worker

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHandoffsFallback: an outcome handed over for a claim that never
// comes goes to the completer after the wait; while a statement runs on
// the lock session the wait starts again, a bounded number of times; a
// claim that takes the outcomes first leaves the completer nothing; and
// once claiming stops, what is pending goes to the completer and nothing
// more is taken.
func TestHandoffsFallback(t *testing.T) {
	t.Parallel()
	type got struct {
		mu  sync.Mutex
		ids []int64
	}
	newHandoffs := func(g *got, busy func() bool) *handoffs {
		return &handoffs{wait: time.Millisecond, busy: busy, fallback: func(b []finish) {
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, f := range b {
				g.ids = append(g.ids, f.id)
			}
		}}
	}
	wait := func(g *got, n int) []int64 {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			g.mu.Lock()
			ids := append([]int64(nil), g.ids...)
			g.mu.Unlock()
			if len(ids) >= n || time.Now().After(deadline) {
				return ids
			}
			time.Sleep(time.Millisecond)
		}
	}

	t.Run("no claim comes", func(t *testing.T) {
		var g got
		h := newHandoffs(&g, func() bool { return false })
		h.offer(finish{id: 1})
		h.offer(finish{id: 2})
		if ids := wait(&g, 2); len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
			t.Fatalf("the completer got %v, want [1 2]", ids)
		}
	})

	t.Run("waits while the session is busy", func(t *testing.T) {
		var g got
		var busy atomic.Bool
		busy.Store(true)
		var asked atomic.Int32
		h := newHandoffs(&g, func() bool { asked.Add(1); return busy.Load() })
		h.offer(finish{id: 1})
		for deadline := time.Now().Add(10 * time.Second); asked.Load() < 3; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the lock session was asked %d times in 10 s whether it was busy, want 3", asked.Load())
			}
		}
		if ids := wait(&g, 0); len(ids) != 0 {
			t.Fatalf("the completer got %v while the session was busy", ids)
		}
		busy.Store(false)
		if ids := wait(&g, 1); len(ids) != 1 {
			t.Fatalf("the completer got %v once the session was free, want [1]", ids)
		}
	})

	t.Run("bounded while the session stays busy", func(t *testing.T) {
		var g got
		h := newHandoffs(&g, func() bool { return true })
		h.offer(finish{id: 1})
		if ids := wait(&g, 1); len(ids) != 1 {
			t.Fatalf("the completer got %v, want [1] after %d waits", ids, handoffWaits)
		}
	})

	t.Run("a claim takes them first", func(t *testing.T) {
		var g got
		h := newHandoffs(&g, func() bool { return false })
		h.wait = time.Hour
		h.offer(finish{id: 1})
		if b := h.take(); len(b) != 1 || b[0].id != 1 {
			t.Fatalf("the claim took %v, want task 1", b)
		}
		h.wait = time.Millisecond
		h.offer(finish{id: 2})
		if ids := wait(&g, 1); len(ids) != 1 || ids[0] != 2 {
			t.Fatalf("the completer got %v, want [2] only", ids)
		}
	})

	t.Run("close", func(t *testing.T) {
		var g got
		h := newHandoffs(&g, func() bool { return false })
		h.wait = time.Hour
		h.offer(finish{id: 1})
		h.close()
		if ids := wait(&g, 1); len(ids) != 1 || ids[0] != 1 {
			t.Fatalf("the completer got %v at close, want [1]", ids)
		}
		if h.offer(finish{id: 2}) {
			t.Error("an outcome was taken after close")
		}
		if b := h.take(); len(b) != 0 {
			t.Errorf("a claim took %v after close", b)
		}
	})
}

// TestBusyOrSettling: a wait for a claim to carry outcomes starts again
// while a statement runs on the lock session and for handoffSettle after
// it ends (the claim loop woken meanwhile has yet to send its claim), and
// not later.
func TestBusyOrSettling(t *testing.T) {
	t.Parallel()
	s := &lockSession{}
	now := time.Now()
	if s.busyOrSettling(now) {
		t.Fatal("a session never used is busy")
	}
	s.busySince.Store(now.UnixNano())
	if !s.busyOrSettling(now.Add(time.Hour)) {
		t.Fatal("a statement in flight is not busy")
	}
	s.busySince.Store(0)
	s.freeSince.Store(now.UnixNano())
	if !s.busyOrSettling(now.Add(handoffSettle / 2)) {
		t.Fatal("a session free for half of handoffSettle is not settling")
	}
	if s.busyOrSettling(now.Add(handoffSettle)) {
		t.Fatal("a session free for handoffSettle is still settling")
	}
}
