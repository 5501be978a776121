package worker

import (
	"context"
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
	all   *semaphore.Weighted
	freed chan struct{} // a slot was given back; for coalescing claims
	batch int           // ClaimBatch: the most one claim takes
}

func newSlots(concurrency, batch int) *slots {
	return &slots{all: semaphore.NewWeighted(int64(concurrency)), freed: make(chan struct{}, 1), batch: batch}
}

// acquire waits for one free slot, of the queue's cap q (if any) and of the
// process, then takes as many more as are free, up to the batch. When
// coalesce is set it waits up to coalesceWait for a full batch.
func (s *slots) acquire(ctx context.Context, q *semaphore.Weighted, coalesce bool) (int, error) {
	if q != nil {
		if err := q.Acquire(ctx, 1); err != nil {
			return 0, err
		}
	}
	if err := s.all.Acquire(ctx, 1); err != nil {
		if q != nil {
			q.Release(1)
		}
		return 0, err
	}
	n := s.takeMore(q, 1)
	if coalesce && n < s.batch {
		deadline := time.NewTimer(coalesceWait)
		defer deadline.Stop()
		for n < s.batch {
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

// takeMore takes free slots without waiting, up to the batch.
func (s *slots) takeMore(q *semaphore.Weighted, n int) int {
	for n < s.batch {
		if q != nil && !q.TryAcquire(1) {
			break
		}
		if !s.all.TryAcquire(1) {
			if q != nil {
				q.Release(1)
			}
			break
		}
		n++
	}
	return n
}

// release gives back n slots a claim did not use.
func (s *slots) release(q *semaphore.Weighted, n int) {
	if n <= 0 {
		return
	}
	s.all.Release(int64(n))
	if q != nil {
		q.Release(int64(n))
	}
}

// free gives back the slots of a batch of written outcomes and wakes a
// claim loop that waits to fill its claim.
func (s *slots) free(batch []finish) {
	s.all.Release(int64(len(batch)))
	for _, f := range batch {
		if f.slots != nil {
			f.slots.Release(1)
		}
	}
	select {
	case s.freed <- struct{}{}:
	default:
	}
}
