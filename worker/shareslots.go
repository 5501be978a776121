package worker

import (
	"context"
	"sync"
	"time"
)

// The Concurrency of a ShardedWorker, shared by its shards.
//
// Each shard's Worker has slots of the process's whole Concurrency, of
// which it holds back (slots.held) or owes (slots.owed) what other shards
// have: its capacity is the rest, and the capacities of the shards add up
// to Concurrency, less the slots owed and not yet given. They start at the
// even split, each shard's share. Capacity moves when a claim loop finds
// no free slot on its shard:
//
//   - It borrows the free capacity of shards without work (idle: none of
//     their claim loops took all it asked for, or found no free slot,
//     within lendAfter, and none waits for a slot), down to one slot each,
//     so that a shard's first task never waits for another's to end. No
//     shard borrows while one waits for its share back.
//   - Failing that, a shard below its share takes it back: the free
//     capacity of idle shards and of shards above their share at once, and
//     the rest as the tasks of shards above their share end (they owe it:
//     their next freed slots come to it, the furthest below its share
//     first).
//
// So with work on one shard only, that shard runs Concurrency less one
// slot for each other shard; with work on every shard, each has its share,
// no shard grows while another waits for its share, and each claims within
// its own capacity, in batches, as a Worker of that size would. A Worker
// of its own has no sharedSlots (slots.shared is nil): its claim loops
// take its slots as they always have.
type sharedSlots struct {
	mu     sync.Mutex
	shards []*slots
	share  []int64 // per shard: its part of the even split
	size   int64   // Concurrency: every shard's slots have that many
	// wait is, per shard, the slots other shards owe it.
	wait []int64
}

// lendAfter is how long after a claim loop last took all it asked for, or
// found no free slot, its shard counts as one with work, whose capacity
// other shards do not borrow.
const lendAfter = 100 * time.Millisecond

// newSharedSlots makes the slots of each shard, shares[i] being shard i's
// capacity at start and batches[i] its ClaimBatch.
func newSharedSlots(size int, shares, batches []int) *sharedSlots {
	p := &sharedSlots{size: int64(size), share: make([]int64, len(shares)), wait: make([]int64, len(shares))}
	for i, share := range shares {
		s := newSlots(size, batches[i])
		s.shared, s.index = p, i
		held := int64(size - share)
		_ = s.all.Acquire(context.Background(), held) // free: nothing runs yet
		s.held.Store(held)
		p.shards = append(p.shards, s)
		p.share[i] = int64(share)
	}
	return p
}

// acquire takes one slot of shard s, moving capacity to it first when it
// has none free. backlog says that its claim loop's last claim took all it
// asked for.
func (p *sharedSlots) acquire(ctx context.Context, s *slots, backlog bool) error {
	if backlog {
		s.wanted.Store(time.Now().UnixNano())
	}
	if s.all.TryAcquire(1) {
		return nil
	}
	s.wanted.Store(time.Now().UnixNano())
	if p.borrow(s, int64(s.batch())) == 0 {
		p.reclaim(s)
	}
	return s.all.Acquire(ctx, 1)
}

// capacity is shard s's capacity; under mu.
func (p *sharedSlots) capacity(s *slots) int64 { return p.size - s.held.Load() - s.owed.Load() }

// lendable reports whether shard i has no work, as far as its claim loops
// say; under mu.
func (p *sharedSlots) lendable(i int, now int64) bool {
	return p.wait[i] == 0 && now-p.shards[i].wanted.Load() > int64(lendAfter)
}

// take moves up to k free slots of shard o out of its capacity, keeping at
// least floor, and returns how many; under mu. A shard whose claim loops
// are held back (isolate.go) keeps its slots: its isolator counts them.
func (p *sharedSlots) take(o *slots, k, floor int64) int64 {
	o.pausedMu.Lock()
	defer o.pausedMu.Unlock()
	if o.paused != nil {
		return 0
	}
	var got int64
	for got < k && p.capacity(o) > floor && o.all.TryAcquire(1) {
		o.held.Add(1)
		got++
	}
	return got
}

// give adds k slots to shard s's capacity, free for its claim loops; under
// mu.
func (p *sharedSlots) give(s *slots, k int64) {
	if k <= 0 {
		return
	}
	s.held.Add(-k)
	s.all.Release(k)
}

// borrow moves up to k free slots of idle shards to shard s, and returns
// how many.
func (p *sharedSlots) borrow(s *slots, k int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.wait {
		if w > 0 {
			return 0 // a shard waits for its share: freed slots are its
		}
	}
	now := time.Now().UnixNano()
	var got int64
	for i, o := range p.shards {
		if got == k {
			break
		}
		if o != s && p.lendable(i, now) {
			got += p.take(o, k-got, 1)
		}
	}
	p.give(s, got)
	return got
}

// reclaim brings shard s back to its share: free slots of idle shards and
// of shards above their share at once, the rest owed by those above it.
func (p *sharedSlots) reclaim(s *slots) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.collect()
	i := s.index
	short := p.share[i] - p.capacity(s) - p.wait[i]
	if short <= 0 {
		return
	}
	now := time.Now().UnixNano()
	for j, o := range p.shards {
		if j == i || short == 0 {
			continue
		}
		floor := p.share[j]
		if p.lendable(j, now) {
			floor = 1
		}
		got := p.take(o, short, floor)
		p.give(s, got)
		short -= got
	}
	for j, o := range p.shards {
		if j == i || short == 0 {
			continue
		}
		o.pausedMu.Lock()
		if over := p.capacity(o) - p.share[j]; over > 0 && o.paused == nil {
			k := min(over, short)
			o.owed.Add(k)
			p.wait[i] += k
			short -= k
		}
		o.pausedMu.Unlock()
	}
}

// repay keeps up to n of shard o's freed slots for what it owes, gives
// them to the shards that wait for them, and returns how many it kept.
func (p *sharedSlots) repay(o *slots, n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := min(o.owed.Load(), int64(n))
	if k <= 0 {
		return 0
	}
	o.owed.Add(-k)
	o.held.Add(k)
	if left := p.hand(k); left > 0 {
		// No shard waits for them any more: they stay o's.
		o.held.Add(-left)
		k -= left
	}
	return int(k)
}

// collect takes what shards owe out of their free slots, which a claim
// that took fewer tasks than it asked for left there, and gives it to
// the shards that wait; under mu.
func (p *sharedSlots) collect() {
	for _, o := range p.shards {
		owed := o.owed.Load()
		if owed <= 0 {
			continue
		}
		var got int64
		for got < owed && o.all.TryAcquire(1) {
			got++
		}
		o.owed.Add(-got)
		o.held.Add(got)
		if left := p.hand(got); left > 0 {
			o.held.Add(-left)
			o.all.Release(left)
		}
	}
}

// hand gives k slots to the shards that wait for them, one at a time to
// the one furthest below its share, and returns those left when none
// waits; under mu. The caller has taken them out of a shard's capacity.
func (p *sharedSlots) hand(k int64) (left int64) {
	for left = k; left > 0; left-- {
		j, most := -1, int64(0)
		for i, s := range p.shards {
			if short := p.share[i] - p.capacity(s); p.wait[i] > 0 && (j < 0 || short > most) {
				j, most = i, short
			}
		}
		if j < 0 {
			break
		}
		p.wait[j]--
		p.give(p.shards[j], 1)
	}
	return left
}
