package worker

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

func TestAutoWindow(t *testing.T) {
	for _, c := range []struct {
		rtt     time.Duration
		entries int64
		workers int
		settled bool
		want    int
	}{
		{50 * time.Microsecond, 6400, 1, false, localWindow},          // loopback, at start
		{50 * time.Microsecond, 6400, 1, true, settledWindow},         // loopback, settled
		{0, 0, 0, false, localWindow},                                 // nothing known
		{50 * time.Microsecond, 6400, 2, true, 1600},                  // settled, half the lock table shared by two
		{50 * time.Microsecond, 6400, 4, false, 800},                  // loopback, a quarter of half the lock table
		{50 * time.Microsecond, 6400, 8, true, DefaultConcurrency},    // eight: never below the default
		{500 * time.Microsecond, 6400, 1, false, 1000},                // one unit of round trip: twice the default
		{2300 * time.Microsecond, 6400, 1, false, 2800},               // a network
		{2300 * time.Microsecond, 6400, 1, true, 2800},                // past the settled window
		{time.Second, 1 << 30, 1, true, maxAutoConcurrency},           // never past maxAutoConcurrency
		{2300 * time.Microsecond, 6400, 2, false, 1600},               // half the lock table, shared by two
		{2300 * time.Microsecond, 6400, 8, false, DefaultConcurrency}, // eight: the share is 400, but never below the default
		{2300 * time.Microsecond, 0, 8, false, 2800},                  // lease mode: no locks to budget
		{3000 * time.Microsecond, 6400, 0, false, 3200},               // no live worker seen yet counts as one: half the table
		{1500 * time.Microsecond, 64 * 130, 3, false, 1386},           // 8,320 entries / 2 / 3
	} {
		if got := autoWindow(c.rtt, c.entries, c.workers, c.settled); got != c.want {
			t.Errorf("autoWindow(%v, %d, %d, %v) = %d, want %d", c.rtt, c.entries, c.workers, c.settled, got, c.want)
		}
	}
}

// The window sizer gives held-back slots at once and takes them back only
// as running tasks give them up, never waiting; the claim batch follows.
func TestWindowResize(t *testing.T) {
	w := &Worker{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w.slots = newSlots(maxAutoConcurrency, DefaultConcurrency/2)
	w.cfg.Concurrency = DefaultConcurrency
	z := newWindowSizer(w, true, true)
	free := func() int {
		n := 0
		for w.slots.all.TryAcquire(1) {
			n++
		}
		w.slots.all.Release(int64(n))
		return n
	}
	if got := free(); got != DefaultConcurrency {
		t.Fatalf("%d slots free at start, want %d", got, DefaultConcurrency)
	}
	z.resize(1600)
	if got := free(); got != 1600 || w.slots.batch() != 800 {
		t.Fatalf("after growing to 1600: %d free, batch %d", got, w.slots.batch())
	}
	// 1,500 tasks are running; the window shrinks to 500.
	if !w.slots.all.TryAcquire(1500) {
		t.Fatal("could not take 1500 slots")
	}
	z.resize(DefaultConcurrency)
	z.collect()
	if got := free(); got != 0 || w.slots.batch() != DefaultConcurrency/2 {
		t.Fatalf("after shrinking with 1500 running: %d free, batch %d", got, w.slots.batch())
	}
	// 1,200 of them finish, their slots given back by the completer: the
	// window keeps what it is owed.
	w.slots.free(make([]finish, 1200))
	if w.slots.owed.Load() != 0 || w.slots.held.Load() != maxAutoConcurrency-DefaultConcurrency {
		t.Fatalf("owed %d, held %d", w.slots.owed.Load(), w.slots.held.Load())
	}
	if got := free(); got != DefaultConcurrency-300 {
		t.Fatalf("%d free with 300 running in a window of %d", got, DefaultConcurrency)
	}
	// Growing again cancels what is owed before it gives back held slots.
	z.resize(1000)
	w.slots.free(make([]finish, 300))
	if got := free(); got != 1000 {
		t.Fatalf("%d free in a window of 1000 with nothing running", got)
	}
	if z.window() != 1000 {
		t.Fatalf("window %d", z.window())
	}
}
