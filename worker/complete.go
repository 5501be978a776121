package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/semaphore"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/queue"
)

// finishBatch bounds one outcome write.
const finishBatch = 1000

// finish is an attempt's outcome, waiting to be written.
type finish struct {
	id      int64
	attempt int
	gen     uint64
	status  queue.Status
	delayMs int64 // retry delay; -1 keeps run_at
	refund  int   // 1 gives the attempt back
	entry   queue.AttemptError
	slots   *semaphore.Weighted // the queue's own slots, freed with the process's
}

// completer writes outcomes in batches and then releases their locks, in
// that order: a task's outcome is committed before any other worker can
// claim it again. Outcomes that arrive while a batch is being written form
// the next batch, so under load one round trip records many tasks and at
// rest a single task waits for nothing.
type completer struct {
	w       *Worker
	mu      sync.Mutex
	pending []finish
	signal  chan struct{}
	closing chan struct{}
	done    chan struct{}
}

func newCompleter(w *Worker) *completer {
	return &completer{
		w:       w,
		signal:  make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
}

func (c *completer) add(f finish) {
	c.mu.Lock()
	c.pending = append(c.pending, f)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

func (c *completer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.signal:
			c.gather()
			c.flushAll()
		case <-c.closing:
			c.flushAll()
			return
		}
	}
}

// gatherWait bounds how long the completer lets outcomes accumulate before
// writing them: each write is a commit, and under load the outcomes of a
// whole claim arrive within a few hundred microseconds of each other.
const gatherWait = 500 * time.Microsecond

// gather waits up to gatherWait for a fuller batch when few outcomes wait.
func (c *completer) gather() {
	c.mu.Lock()
	n := len(c.pending)
	c.mu.Unlock()
	if n == 0 || n >= finishBatch/10 {
		return
	}
	select {
	case <-time.After(gatherWait):
	case <-c.closing:
	}
}

// close writes what is pending and stops the completer.
func (c *completer) close() {
	close(c.closing)
	<-c.done
}

func (c *completer) flushAll() {
	for {
		c.mu.Lock()
		n := min(len(c.pending), finishBatch)
		batch := c.pending[:n:n]
		c.pending = c.pending[n:]
		c.mu.Unlock()
		if n == 0 {
			return
		}
		c.flush(batch)
	}
}

func (c *completer) flush(batch []finish) {
	w := c.w
	p := db.TaskFinishManyParams{
		WorkerID: w.cfg.WorkerID,
		Ids:      make([]int64, len(batch)),
		Attempts: make([]int32, len(batch)),
		Statuses: make([]string, len(batch)),
		DelayMs:  make([]int64, len(batch)),
		Refunds:  make([]int32, len(batch)),
		Errors:   make([]json.RawMessage, len(batch)),
	}
	for i, f := range batch {
		p.Ids[i] = f.id
		p.Attempts[i] = int32(f.attempt)
		p.Statuses[i] = string(f.status)
		p.DelayMs[i] = f.delayMs
		p.Refunds[i] = int32(f.refund)
		p.Errors[i] = json.RawMessage("null")
		if f.entry.Outcome != "" {
			p.Errors[i], _ = json.Marshal(f.entry)
		}
	}

	written, err := c.write(p)
	if err != nil {
		// The tasks stay running in the table. Releasing their locks lets
		// the rescuer return them to the queue, so nothing is lost.
		w.log.Error("skiplock: could not record task outcomes; their tasks will be rescued and run again", "count", len(batch), "error", err)
	} else if len(written) < len(batch) {
		ok := make(map[int64]bool, len(written))
		for _, id := range written {
			ok[id] = true
		}
		for _, f := range batch {
			if !ok[f.id] {
				w.log.Warn("skiplock: outcome discarded: the task was rescued from this worker after it lost its lock session",
					"task_id", f.id, "attempt", f.attempt, "status", f.status)
			}
		}
	}

	if !w.lease { // a lease ends with the status change
		byGen := map[uint64][]int64{}
		for _, f := range batch {
			byGen[f.gen] = append(byGen[f.gen], f.id)
		}
		for gen, ids := range byGen {
			w.ls.release(ids, gen)
		}
	}
	c.freeSlots(batch)
	c.notifyRetries(batch)
}

// freeSlots gives the batch's slots back and wakes a claim loop that waits
// to fill its claim.
func (c *completer) freeSlots(batch []finish) {
	w := c.w
	w.slots.Release(int64(len(batch)))
	for _, f := range batch {
		if f.slots != nil {
			f.slots.Release(1)
		}
	}
	select {
	case w.slotFreed <- struct{}{}:
	default:
	}
}

// notifyRetries wakes this worker's claim loops for tasks that are due again
// at once (a retry without delay, a task handed back at shutdown): their
// insert notification is long gone.
func (c *completer) notifyRetries(batch []finish) {
	for _, f := range batch {
		if f.status == queue.StatusPending && f.delayMs <= 0 {
			c.w.wakeAll()
			return
		}
	}
}

// write records a batch, retrying while the failure is one a retry can fix
// (a lost connection, a restarting server, a deadlock with the rescuer).
func (c *completer) write(p db.TaskFinishManyParams) ([]int64, error) {
	backoff := 50 * time.Millisecond
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		written, err := c.w.queries.TaskFinishMany(ctx, customPlans{c.w.pool}, p)
		cancel()
		if err == nil || !retryable(err) || time.Now().After(deadline) {
			return written, err
		}
		c.w.log.Warn("skiplock: recording task outcomes failed; retrying", "error", err, "retry_in", backoff)
		time.Sleep(backoff)
		backoff = min(backoff*2, 2*time.Second)
	}
}

// retryable reports whether a statement that failed with err may succeed if
// sent again.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true // the connection, not the statement
	}
	switch pgErr.Code[:2] {
	case "08", "57", "53", "40": // connection, operator intervention, resources, rollback
		return true
	}
	return false
}
