package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/semaphore"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/queue"
)

// finishBatch bounds one outcome write.
const finishBatch = 1000

// finish is an attempt's outcome, waiting to be written.
type finish struct {
	id      int64
	attempt int
	// claimed is the claim's started_at (execution.claimed), which fences
	// the write with the attempt (TaskFinishMany): the worker and the
	// attempt alone may name two claims.
	claimed time.Time
	gen     uint64
	limits  []int32 // limit slot locks to release with the task's
	gated   bool    // its end may let a waiting task run (execution.gated)
	// exclusiveKey: the exclusive key it held, if any, free to every
	// worker once the outcome is written.
	exclusiveKey string
	queue        string
	status       queue.Status
	delayMs      int64 // retry delay; -1 keeps run_at
	refund       int   // 1 gives the attempt back
	entry        queue.AttemptError
	output       json.RawMessage     // a completed task's output; nil for none
	slots        *semaphore.Weighted // the queue's own slots, freed with the process's
	// slotFreed: its slots went back when it was handed over to a claim
	// (handoff.go), which did not carry it after all.
	slotFreed bool
}

// completer writes outcomes in batches and then releases their tasks'
// guards, in that order: a task's outcome is committed before any other
// worker can claim it again. Outcomes that arrive while a batch is being
// written form the next batch, so under load one round trip records many
// tasks and at rest a single task waits for nothing. It runs in a
// goroutine of its own (run), started by Run and stopped by close once
// every handler has settled.
type completer struct {
	// write records a batch of outcomes once (TaskFinishMany) and returns
	// the ids it wrote; the completer retries it.
	write func(ctx context.Context, p db.TaskFinishManyParams) ([]int64, error)
	// release lets go of the batch's guards (guard.release); free gives
	// back its slots (slots.free); wake wakes the claim loop of a queue
	// ("": every claim loop).
	release func(batch []finish)
	free    func(batch []finish)
	wake    func(queue string)
	log     *slog.Logger

	mu      sync.Mutex
	pending []finish
	// pendingGated: some of pending hold a place another task may be
	// waiting for (finish.gated).
	pendingGated bool
	// spare holds emptied buffers of pendingCap outcomes for pending to
	// reuse: a finish is a few hundred bytes, and pending grown afresh for
	// every write was the worker's largest allocation per task.
	spare   [][]finish
	signal  chan struct{}
	closing chan struct{}
	done    chan struct{}
	outage  *outage // retries of outcome writes, logged once per outage

	// Outcome writes in flight, at most writes at once. Across a network
	// a write waits a round trip for its commit, and the slots of its
	// tasks stay taken until it is done: there, outcomes that arrive
	// meanwhile go out in a write of their own instead of waiting for it
	// (the window sizer, window.go, allows maxWrites once the round trip
	// passes parallelWritesRTT). On loopback one write at a time gathers
	// more outcomes per commit, and was faster.
	writes   atomic.Int32
	writing  int           // under mu
	wrote    chan struct{} // a write ended
	inFlight sync.WaitGroup
}

// maxWrites bounds the outcome writes in flight at once across a network,
// each on a connection of the pool.
const maxWrites = 3

func newCompleter(write func(context.Context, db.TaskFinishManyParams) ([]int64, error), release, free func([]finish), wake func(string), log *slog.Logger, writes int) *completer {
	c := &completer{
		write: write, release: release, free: free, wake: wake, log: log,
		outage:  &outage{log: log, what: "recording task outcomes"},
		signal:  make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		wrote:   make(chan struct{}, 1),
	}
	c.writes.Store(int32(max(writes, 1)))
	return c
}

// allowWrites sets how many outcome writes may be in flight at once.
func (c *completer) allowWrites(n int) { c.writes.Store(int32(max(n, 1))) }

// pendingCap is the capacity of the buffers that gather outcomes: a write's
// worth, which a worker of the default Concurrency never fills.
const pendingCap = finishBatch

func (c *completer) add(f finish) {
	c.mu.Lock()
	if c.pending == nil {
		if n := len(c.spare); n > 0 {
			c.pending, c.spare = c.spare[n-1], c.spare[:n-1]
		} else {
			c.pending = make([]finish, 0, pendingCap)
		}
	}
	c.pending = append(c.pending, f)
	c.pendingGated = c.pendingGated || f.gated
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
	if f.gated {
		// flushAll may be waiting for a write to end: it looks again.
		select {
		case c.wrote <- struct{}{}:
		default:
		}
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
			c.inFlight.Wait()
			return
		}
	}
}

// gatherWait bounds how long the completer lets outcomes accumulate before
// writing them: each write is a commit, and under load the outcomes of a
// whole claim arrive within a few hundred microseconds of each other.
const gatherWait = 500 * time.Microsecond

// gather waits up to gatherWait for a fuller batch when few outcomes wait,
// unless one of them holds a place that another task may be waiting for (a
// limit's, an exclusive key): that place frees only once the write is done.
func (c *completer) gather() {
	c.mu.Lock()
	n, gated := len(c.pending), c.pendingGated
	c.mu.Unlock()
	if n == 0 || n >= finishBatch/10 || gated {
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

// flushAll sends what is pending, in writes of up to finishBatch, each
// as soon as fewer writes than allowed are in flight; up to maxWrites when
// some of it is gated (writeNow).
func (c *completer) flushAll() {
	for {
		c.mu.Lock()
		for c.writing >= c.allowed() {
			c.mu.Unlock()
			<-c.wrote
			c.mu.Lock()
		}
		n := min(len(c.pending), finishBatch)
		if n == 0 {
			c.mu.Unlock()
			return
		}
		var batch []finish
		if n == len(c.pending) && cap(c.pending) == pendingCap {
			// The whole buffer goes to the write, and comes back empty.
			batch, c.pending = c.pending, nil
		} else {
			batch, c.pending = c.pending[:n:n], c.pending[n:]
			if len(c.pending) == 0 {
				c.pending = nil // the next add takes a spare buffer
			}
		}
		c.pendingGated = false
		for _, f := range c.pending {
			c.pendingGated = c.pendingGated || f.gated
		}
		c.writing++
		c.mu.Unlock()
		c.inFlight.Add(1)
		go func() {
			defer c.inFlight.Done()
			c.flush(batch)
			c.mu.Lock()
			c.writing--
			if cap(batch) == pendingCap && len(c.spare) <= maxWrites {
				clear(batch) // keeps no task's memory alive
				c.spare = append(c.spare, batch[:0])
			}
			c.mu.Unlock()
			select {
			case c.wrote <- struct{}{}:
			default:
			}
		}()
	}
}

// writeNow is how many writes may be in flight when a gated outcome waits:
// its place frees only once its write is done, and behind a write in
// flight it waited for that one's round trip and commit first (10 ms tasks
// under 3 exclusive keys, 3 workers, 2 shared CPUs: 1.2 ms on average and
// 3.9 ms at the 90th percentile between a task's end and its write, of a
// 12 ms hand-off to the key's next task). Bounded, so that a workload of
// exclusive tasks alone still gathers its outcomes.
const writeNow = maxWrites

// allowed is how many writes may be in flight now (mu held).
func (c *completer) allowed() int {
	n := int(c.writes.Load())
	if c.pendingGated {
		n = max(n, writeNow)
	}
	return n
}

func (c *completer) flush(batch []finish) {
	written, err := c.writeRetrying(finishParams(batch))
	if err != nil {
		// The tasks stay running in the table. Releasing their locks lets
		// the rescuer return them to the queue, so nothing is lost.
		c.log.Error("skiplock: could not record task outcomes; their tasks will be rescued and run again", "count", len(batch), "error", err)
	} else {
		c.discarded(batch, written)
	}

	c.release(batch)
	c.free(batch)
	c.wakeClaims(batch)
}

// discarded logs the outcomes of a batch that its write did not write.
func (c *completer) discarded(batch []finish, written []int64) {
	if len(written) < len(batch) {
		ok := make(map[int64]bool, len(written))
		for _, id := range written {
			ok[id] = true
		}
		// One line per batch, not per task: a storm of lost sessions
		// discards thousands.
		var discarded []int64
		for _, f := range batch {
			if !ok[f.id] {
				discarded = append(discarded, f.id)
			}
		}
		c.log.Warn("skiplock: outcomes discarded: their tasks were rescued from this worker after it lost its lock session or its leases",
			"count", len(discarded), "task_ids", firstIDs(discarded))
	}
}

// writeFinishes records a batch of this worker's outcomes once, and returns
// the IDs it wrote: the others were no longer this worker's.
func (w *Worker) writeFinishes(ctx context.Context, p db.TaskFinishManyParams) ([]int64, error) {
	p.WorkerID = w.cfg.WorkerID
	if w.cfg.DeleteCompleted {
		return w.writeDeleting(ctx, p)
	}
	return outcomePlan(ctx, w.queries, w.pool, func(tx db.DBTX) ([]int64, error) {
		if onlyCompletions(p) {
			return w.queries.TaskCompleteManyIDs(ctx, tx,
				db.TaskCompleteManyParams{WorkerID: p.WorkerID, Ids: p.Ids, Attempts: p.Attempts, ClaimedUs: p.ClaimedUs})
		}
		return w.queries.TaskFinishMany(ctx, tx, p)
	})
}

// writeDeleting writes a batch for a worker with DeleteCompleted: its
// completions without output go to TaskCompleteManyDeleting, whatever the
// rest of the batch holds, and the other outcomes to TaskFinishMany, both
// in one transaction when there are both, so that a retry of the batch
// finds it as it was.
func (w *Worker) writeDeleting(ctx context.Context, p db.TaskFinishManyParams) ([]int64, error) {
	done := db.TaskCompleteManyDeletingParams{WorkerID: p.WorkerID}
	rest := db.TaskFinishManyParams{WorkerID: p.WorkerID}
	for i, id := range p.Ids {
		if onlyCompletion(p, i) {
			done.Ids = append(done.Ids, id)
			done.Attempts = append(done.Attempts, p.Attempts[i])
			done.ClaimedUs = append(done.ClaimedUs, p.ClaimedUs[i])
			continue
		}
		rest.Ids = append(rest.Ids, id)
		rest.Attempts = append(rest.Attempts, p.Attempts[i])
		rest.ClaimedUs = append(rest.ClaimedUs, p.ClaimedUs[i])
		rest.Statuses = append(rest.Statuses, p.Statuses[i])
		rest.DelayMs = append(rest.DelayMs, p.DelayMs[i])
		rest.Refunds = append(rest.Refunds, p.Refunds[i])
		rest.Errors = append(rest.Errors, p.Errors[i])
		rest.Outputs = append(rest.Outputs, p.Outputs[i])
	}
	switch {
	case len(rest.Ids) == 0:
		return w.queries.TaskCompleteManyDeleting(ctx, customPlans{w.pool}, done)
	case len(done.Ids) == 0:
		return outcomePlan(ctx, w.queries, w.pool, func(tx db.DBTX) ([]int64, error) {
			return w.queries.TaskFinishMany(ctx, tx, rest)
		})
	}
	var wrote []int64
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		deleted, err := w.queries.TaskCompleteManyDeleting(ctx, customPlans{tx}, done)
		if err != nil {
			return err
		}
		// The settings hold to the transaction's end: the write after them
		// takes its safe shape (OutcomePlanSettings).
		if err := w.queries.OutcomePlanSettings(ctx, customPlans{tx}); err != nil {
			return err
		}
		finished, err := w.queries.TaskFinishMany(ctx, customPlans{tx}, rest)
		wrote = append(deleted, finished...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return wrote, nil
}

// onlyCompletions reports whether every outcome of a batch is a completion
// without output, which TaskCompleteMany writes as TaskFinishMany would,
// for less.
func onlyCompletions(p db.TaskFinishManyParams) bool {
	for i := range p.Ids {
		if !onlyCompletion(p, i) {
			return false
		}
	}
	return true
}

// onlyCompletion reports whether outcome i of a batch is a completion
// without output.
func onlyCompletion(p db.TaskFinishManyParams, i int) bool {
	return p.Statuses[i] == string(queue.StatusCompleted) && p.DelayMs[i] < 0 && p.Refunds[i] == 0 &&
		string(p.Errors[i]) == "null" && string(p.Outputs[i]) == "null"
}

// jsonNull is JSON null, shared by every outcome without an error or an
// output (a conversion from a string constant is an allocation each time).
// Nothing writes into it.
var jsonNull = json.RawMessage("null")

// finishParams lays a batch of outcomes out for TaskFinishMany; the
// worker's ID is the writer's to set.
func finishParams(batch []finish) db.TaskFinishManyParams {
	p := db.TaskFinishManyParams{
		Ids:       make([]int64, len(batch)),
		Attempts:  make([]int32, len(batch)),
		ClaimedUs: make([]int64, len(batch)),
		Statuses:  make([]string, len(batch)),
		DelayMs:   make([]int64, len(batch)),
		Refunds:   make([]int32, len(batch)),
		Errors:    make([]json.RawMessage, len(batch)),
		Outputs:   make([]json.RawMessage, len(batch)),
	}
	for i, f := range batch {
		p.Ids[i] = f.id
		p.Attempts[i] = int32(f.attempt)
		p.ClaimedUs[i] = f.claimed.UnixMicro()
		p.Statuses[i] = string(f.status)
		p.DelayMs[i] = f.delayMs
		p.Refunds[i] = int32(f.refund)
		p.Errors[i] = jsonNull
		if f.entry.Outcome != "" {
			p.Errors[i], _ = json.Marshal(f.entry)
		}
		p.Outputs[i] = jsonNull
		if f.output != nil {
			p.Outputs[i] = f.output
		}
	}
	return p
}

// wakeClaims wakes this worker's claim loops that the batch may have given
// work: every loop when a gated task ended (a limit may span queues, and a
// claim loop that took fewer tasks than it asked waits for no one else to
// free a place; the guard tells the other workers), and the loop of a task
// that is due again at once (a retry without delay, a task handed back at
// shutdown), whose insert notification is long gone (wakeDue). Waking a
// busy loop costs nothing: it claims again anyway.
func (c *completer) wakeClaims(batch []finish) {
	for _, f := range batch {
		if f.gated {
			c.wake("")
			return
		}
	}
	c.wakeDue(batch)
}

// wakeDue wakes the claim loop of each queue with a task of the batch that
// is due again at once.
func (c *completer) wakeDue(batch []finish) {
	woken := map[string]bool{}
	for _, f := range batch {
		if f.status == queue.StatusPending && f.delayMs <= 0 && !woken[f.queue] {
			woken[f.queue] = true
			c.wake(f.queue)
		}
	}
}

// writeRetrying records a batch, retrying while the failure is one a retry
// can fix (a lost connection, a restarting server, a deadlock with the
// rescuer).
func (c *completer) writeRetrying(p db.TaskFinishManyParams) ([]int64, error) {
	backoff := 50 * time.Millisecond
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		written, err := c.write(ctx, p)
		cancel()
		if err == nil {
			c.outage.ok()
		}
		if err == nil || !pgerr.Retryable(err) || time.Now().After(deadline) {
			return written, err
		}
		c.outage.failed(err, "retry_in", backoff)
		time.Sleep(backoff)
		backoff = min(backoff*2, 2*time.Second)
	}
}

// firstIDs lists up to 10 task ids for a log line, and how many more.
func firstIDs(ids []int64) string {
	var b strings.Builder
	for i, id := range ids {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more", len(ids)-i)
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}
