package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// coalesceWait bounds how long a saturated claim loop waits for more free
// slots before claiming: handlers that finish together free their slots
// over a few hundred microseconds, and one claim of many tasks costs the
// lock session far less than many claims of a few.
const coalesceWait = time.Millisecond

// slots caps the tasks that run at once: Concurrency in the process, and a
// queue's own cap (QueueConcurrency) where it has one. A claim loop takes
// slots before it claims; the completer gives them back once the outcomes
// are written, so that when writes fall behind claims wait, rather than
// piling up unwritten outcomes that each hold a task.
type slots struct {
	all      *semaphore.Weighted
	size     int64         // all's weight
	freed    chan struct{} // a slot was given back; for coalescing claims
	batchMax atomic.Int64  // ClaimBatch: the most one claim takes (the window sizer may change it)
	// owed is how many slots a shrinking window (window.go) still takes
	// back: free keeps them instead of giving them to the claim loops.
	owed atomic.Int64
	held atomic.Int64 // slots the window holds back
	// paused, while set, holds the claim loops back before they take a
	// slot: a suspect task runs alone (isolate.go). Closed on resume.
	pausedMu sync.Mutex
	paused   chan struct{}
	// shared, for a shard of a ShardedWorker, is the process's
	// Concurrency that its shards share (shareslots.go), and index this
	// shard's place in it; nil for a Worker of its own.
	shared *sharedSlots
	index  int
	wanted atomic.Int64 // when a claim loop last had work or found no free slot, in Unix ns
}

// pause holds every claim loop back at its next acquire, until resume,
// and returns the slots of the worker (those the window holds back, or
// another shard has, left out).
func (s *slots) pause() int64 {
	s.pausedMu.Lock()
	defer s.pausedMu.Unlock()
	if s.paused == nil {
		s.paused = make(chan struct{})
	}
	return s.size - s.held.Load() - s.owed.Load()
}

// resume lets the claim loops take slots again.
func (s *slots) resume() {
	s.pausedMu.Lock()
	defer s.pausedMu.Unlock()
	if s.paused != nil {
		close(s.paused)
		s.paused = nil
	}
}

// waitResumed waits while the claim loops are held back.
func (s *slots) waitResumed(ctx context.Context) error {
	for {
		s.pausedMu.Lock()
		ch := s.paused
		s.pausedMu.Unlock()
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func newSlots(concurrency, batch int) *slots {
	s := &slots{all: semaphore.NewWeighted(int64(concurrency)), size: int64(concurrency), freed: make(chan struct{}, 1)}
	s.batchMax.Store(int64(batch))
	return s
}

func (s *slots) batch() int { return int(s.batchMax.Load()) }

func (s *slots) setBatch(n int) { s.batchMax.Store(int64(n)) }

func (s *slots) signalFreed() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// acquire waits while the claim loops are held back (pause), then for one
// free slot, of the queue's cap q (if any) and of the process, then takes
// as many more as are free, up to the batch. When
// coalesce is set it waits up to coalesceWait for a full batch.
func (s *slots) acquire(ctx context.Context, q *semaphore.Weighted, coalesce bool) (int, error) {
	if err := s.waitResumed(ctx); err != nil {
		return 0, err
	}
	if q != nil {
		if err := q.Acquire(ctx, 1); err != nil {
			return 0, err
		}
	}
	if err := s.acquireOne(ctx, coalesce); err != nil {
		if q != nil {
			q.Release(1)
		}
		return 0, err
	}
	n := s.takeMore(q, 1)
	if batch := s.batch(); coalesce && n < batch {
		deadline := time.NewTimer(coalesceWait)
		defer deadline.Stop()
		for n < batch {
			select {
			case <-s.freed:
				n = s.takeMore(q, n)
			case <-deadline.C:
				return n, nil
			}
		}
	}
	return n, nil
}

// acquireOne waits for one free slot; a shard of a ShardedWorker moves
// capacity to it first when it has none (shareslots.go).
func (s *slots) acquireOne(ctx context.Context, backlog bool) error {
	if s.shared == nil {
		return s.all.Acquire(ctx, 1)
	}
	return s.shared.acquire(ctx, s, backlog)
}

// takeMore takes free slots without waiting, up to the batch.
func (s *slots) takeMore(q *semaphore.Weighted, n int) int {
	for batch := s.batch(); n < batch; {
		if q != nil && !q.TryAcquire(1) {
			break
		}
		if !s.all.TryAcquire(1) && !s.borrow(batch-n) {
			if q != nil {
				q.Release(1)
			}
			break
		}
		n++
	}
	return n
}

// borrow, for a shard of a ShardedWorker without a free slot, moves up to
// k free slots of idle shards to it, and takes one.
func (s *slots) borrow(k int) bool {
	return s.shared != nil && s.shared.borrow(s, int64(k)) > 0 && s.all.TryAcquire(1)
}

// release gives back n slots a claim did not use.
func (s *slots) release(q *semaphore.Weighted, n int) {
	if n <= 0 {
		return
	}
	kept := 0
	if s.shared != nil {
		kept = s.reclaim(n) // what the shard owes other shards goes to them
	}
	s.all.Release(int64(n - kept))
	if q != nil {
		q.Release(int64(n))
	}
}

// free gives back the slots of a batch of written outcomes and wakes a
// claim loop that waits to fill its claim.
func (s *slots) free(batch []finish) {
	n := 0
	for _, f := range batch {
		if f.slotFreed {
			continue
		}
		n++
		if f.slots != nil {
			f.slots.Release(1)
		}
	}
	s.all.Release(int64(n - s.reclaim(n)))
	s.signalFreed()
}

// reclaim keeps up to n freed slots for a window that owes them, and
// reports how many it kept.
func (s *slots) reclaim(n int) int {
	for {
		owed := s.owed.Load()
		k := min(owed, int64(n))
		if k <= 0 {
			return 0
		}
		if s.shared != nil {
			return s.shared.repay(s, n) // owed to other shards
		}
		if s.owed.CompareAndSwap(owed, owed-k) {
			s.held.Add(k)
			return int(k)
		}
	}
}
