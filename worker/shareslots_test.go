package worker

import (
	"context"
	"testing"
	"time"
)

// sharesHeld checks that the shards' capacities and what they owe add up
// to the process's Concurrency, and returns each shard's capacity.
func sharesHeld(t *testing.T, p *sharedSlots) []int64 {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	caps := make([]int64, len(p.shards))
	sum := int64(0)
	for i, s := range p.shards {
		caps[i] = p.capacity(s)
		sum += caps[i] + s.owed.Load()
		if caps[i] < 0 || s.held.Load() < 0 || s.owed.Load() < 0 {
			t.Fatalf("shard %d: capacity %d, held %d, owed %d", i, caps[i], s.held.Load(), s.owed.Load())
		}
	}
	if sum != p.size {
		t.Fatalf("capacities %v and owed slots add up to %d, want %d", caps, sum, p.size)
	}
	return caps
}

// takeAll takes every slot shard s can have without waiting, as a claim
// loop with a backlog does.
func takeAll(t *testing.T, s *slots) int { return takeWaiting(t, s, 50*time.Millisecond) }

// takeWaiting is takeAll, waiting up to wait for each slot.
func takeWaiting(t *testing.T, s *slots, wait time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	n := 0
	for {
		got, err := s.acquire(ctx, nil, true)
		if err != nil {
			return n
		}
		n += got
	}
}

// TestSharedSlots: a shard with work takes the free slots of shards
// without (all but one each); a shard that gets work back takes its share
// back as the other's tasks end, and while it waits the other grows no
// more.
func TestSharedSlots(t *testing.T) {
	p := newSharedSlots(12, []int{4, 4, 4}, []int{2, 2, 2})
	a, b := p.shards[0], p.shards[1]
	if caps := sharesHeld(t, p); caps[0] != 4 || caps[1] != 4 || caps[2] != 4 {
		t.Fatalf("capacities at start: %v, want the even split", caps)
	}
	if n := takeAll(t, a); n != 10 {
		t.Fatalf("a shard with work alone took %d slots of 12 over 3 shards, want 10", n)
	}
	if caps := sharesHeld(t, p); caps[0] != 10 || caps[1] != 1 || caps[2] != 1 {
		t.Fatalf("capacities: %v", caps)
	}

	// a's claim loops have work throughout: it lends nothing.
	a.wanted.Store(time.Now().Add(time.Hour).UnixNano())
	// b has work: its one slot, then it waits for its share.
	if n := takeAll(t, b); n != 1 {
		t.Fatalf("b took %d, want its one slot", n)
	}
	got := make(chan int, 1)
	go func() { got <- takeWaiting(t, b, time.Second) }()
	time.Sleep(10 * time.Millisecond)
	// a's tasks end one by one; each freed slot goes to b while b is below
	// its share, and a claims none of them.
	for i := range 3 {
		a.free(make([]finish, 1))
		if a.all.TryAcquire(1) {
			t.Fatalf("a took a freed slot while b waits for its share (after %d)", i)
		}
	}
	a.free(make([]finish, 3))
	if n := <-got; n != 3 {
		t.Fatalf("b took %d more, want 3 (to its share of 4)", n)
	}
	if caps := sharesHeld(t, p); caps[0] != 7 || caps[1] != 4 || caps[2] != 1 {
		t.Fatalf("capacities once b has its share: %v, want [7 4 1]", caps)
	}
	// a's freed slots are its own again: 4 of its tasks still run.
	if n := takeAll(t, a); n != 3 {
		t.Fatalf("a took %d of its 3 free slots", n)
	}
	sharesHeld(t, p)
}

// TestSharedSlotsOwedFree: what a shard owes is paid out of the slots its
// claims did not use too, not only out of the slots of tasks that end.
func TestSharedSlotsOwedFree(t *testing.T) {
	p := newSharedSlots(4, []int{2, 2}, []int{1, 1})
	a, b := p.shards[0], p.shards[1]
	if n := takeAll(t, a); n != 3 {
		t.Fatalf("a took %d, want 3", n)
	}
	if n := takeAll(t, b); n != 1 {
		t.Fatalf("b took %d, want 1", n)
	}
	p.reclaim(b) // b waits for one slot, which a owes
	if a.owed.Load() != 1 {
		t.Fatalf("a owes %d, want 1", a.owed.Load())
	}
	a.release(nil, 1) // a claim of a took fewer tasks than it asked for
	if caps := sharesHeld(t, p); caps[0] != 2 || caps[1] != 2 || a.owed.Load() != 0 {
		t.Fatalf("capacities %v, a owes %d: want [2 2], nothing owed", caps, a.owed.Load())
	}
	if !b.all.TryAcquire(1) {
		t.Fatal("b's slot is not free")
	}
}

// TestSharedSlotsCollect: what a shard owes and has free (free and
// release pay first; this is the net under them) is taken when the shard
// it owes looks again.
func TestSharedSlotsCollect(t *testing.T) {
	p := newSharedSlots(4, []int{2, 2}, []int{1, 1})
	a, b := p.shards[0], p.shards[1]
	if n := takeAll(t, a); n != 3 {
		t.Fatalf("a took %d, want 3", n)
	}
	if n := takeAll(t, b); n != 1 {
		t.Fatalf("b took %d, want 1", n)
	}
	p.reclaim(b)
	a.all.Release(2) // free, without paying what a owes
	p.reclaim(b)
	if caps := sharesHeld(t, p); caps[0] != 2 || caps[1] != 2 || a.owed.Load() != 0 {
		t.Fatalf("capacities %v, a owes %d: want [2 2], nothing owed", caps, a.owed.Load())
	}
	if !b.all.TryAcquire(1) {
		t.Fatal("b's slot is not free")
	}
}
