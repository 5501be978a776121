package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/queue"
)

// Queues at run time: AddQueue starts a claim loop on a running worker,
// RemoveQueue stops one. Each queue's claim loop has a context of its own
// under Run's; the set of queues, its loops and the wake channels change
// under queueSet.mu, and the wake channels are read without a lock (a
// copy-on-write map), since every notification and finish reads them.

// ErrStopped is returned by AddQueue and RemoveQueue on a worker whose Run
// has returned or is shutting down.
var ErrStopped = errors.New("skiplock: worker is shutting down or stopped")

// ErrUnknownQueue is wrapped by RemoveQueue's error for a queue the worker
// does not claim from.
var ErrUnknownQueue = errors.New("skiplock: the worker does not claim from queue")

type queueSet struct {
	mu    sync.Mutex
	names []string       // the queues, in the order they were added
	conc  map[string]int // a queue's own cap (AddQueue), when it has one
	ctx   context.Context
	// running: Run claims; the loops of names run. closed: Run is
	// shutting down or over.
	running, closed bool
	loops           map[string]*queueLoop
	wg              sync.WaitGroup
	wakes           atomic.Pointer[map[string]chan struct{}]
}

type queueLoop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newQueueSet(cfg Config) *queueSet {
	qs := &queueSet{names: slices.Clone(cfg.Queues), conc: map[string]int{}, loops: map[string]*queueLoop{}}
	qs.wakes.Store(&map[string]chan struct{}{})
	return qs
}

// wakeChan is the wake channel of a queue's claim loop; nil for none.
func (qs *queueSet) wakeChan(q string) chan struct{} { return (*qs.wakes.Load())[q] }

func (qs *queueSet) wakeNames() []string {
	m := *qs.wakes.Load()
	out := make([]string, 0, len(m))
	for q := range m {
		out = append(out, q)
	}
	return out
}

// setWake adds (ch != nil) or removes a wake channel; qs.mu held.
func (qs *queueSet) setWake(q string, ch chan struct{}) {
	m := make(map[string]chan struct{}, len(*qs.wakes.Load())+1)
	for k, v := range *qs.wakes.Load() {
		m[k] = v
	}
	if ch != nil {
		m[q] = ch
	} else {
		delete(m, q)
	}
	qs.wakes.Store(&m)
}

// Queues returns the queues the worker claims from (before Run: those Run
// will claim from), in the order they were configured or added.
func (w *Worker) Queues() []string {
	w.queues.mu.Lock()
	defer w.queues.mu.Unlock()
	return slices.Clone(w.queues.names)
}

// AddQueue makes the worker claim tasks of queue name too: on a running
// worker it starts the queue's claim loop at once (it claims what is due
// without waiting for a notification); before Run, Run starts it with the
// others. concurrency caps how many of its tasks run at once in this
// process, within Config.Concurrency, as Config.QueueConcurrency does; 0
// is no cap of its own. It is safe to call concurrently with Run and its
// shutdown. It fails naming the problem for an empty or too long name, a
// negative concurrency or a queue the worker already claims from, and with
// ErrStopped once Run is shutting down.
func (w *Worker) AddQueue(name string, concurrency int) error {
	switch {
	case name == "" || len(name) > queue.MaxNameLength:
		return fmt.Errorf("skiplock: queue name must be 1 to %d bytes, got %d", queue.MaxNameLength, len(name))
	case concurrency < 0:
		return fmt.Errorf("skiplock: queue %q: concurrency must not be negative, got %d", name, concurrency)
	}
	qs := w.queues
	qs.mu.Lock()
	defer qs.mu.Unlock()
	switch {
	case qs.closed:
		return fmt.Errorf("%w: cannot add queue %q", ErrStopped, name)
	case slices.Contains(qs.names, name):
		return fmt.Errorf("skiplock: the worker already claims from queue %q", name)
	}
	qs.names = append(qs.names, name)
	if concurrency > 0 {
		qs.conc[name] = concurrency
	}
	w.log.Info("skiplock: queue added", "worker_id", w.cfg.WorkerID, "queue", name)
	if qs.running {
		w.startLoop(name)
		names := slices.Clone(qs.names)
		qs.mu.Unlock()
		w.recordQueues(names)
		qs.mu.Lock() // for the deferred Unlock
	}
	return nil
}

// RemoveQueue makes the worker stop claiming tasks of queue name. On a
// running worker it returns once the queue's claim loop has stopped (no
// claim of the queue is in flight), or with ctx's error if ctx ends first
// (the loop stops all the same). The queue's running tasks run on and
// finish as usual; its pending tasks stay pending, for other workers or a
// later AddQueue. It fails with an error wrapping ErrUnknownQueue for a
// queue the worker does not claim from, and ErrStopped once Run is
// shutting down.
func (w *Worker) RemoveQueue(ctx context.Context, name string) error {
	qs := w.queues
	qs.mu.Lock()
	i := slices.Index(qs.names, name)
	switch {
	case qs.closed:
		qs.mu.Unlock()
		return fmt.Errorf("%w: cannot remove queue %q", ErrStopped, name)
	case i < 0:
		qs.mu.Unlock()
		return fmt.Errorf("%w %q (it claims from %q)", ErrUnknownQueue, name, qs.names)
	}
	qs.names = slices.Delete(qs.names, i, i+1)
	delete(qs.conc, name)
	loop := qs.loops[name]
	delete(qs.loops, name)
	qs.setWake(name, nil)
	running, names := qs.running, slices.Clone(qs.names)
	qs.mu.Unlock()
	if running {
		w.recordQueues(names)
	}
	w.log.Info("skiplock: queue removed", "worker_id", w.cfg.WorkerID, "queue", name)
	if loop == nil {
		return nil
	}
	loop.cancel()
	select {
	case <-loop.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("skiplock: removing queue %q: waiting for its claim loop: %w", name, ctx.Err())
	}
}

// startClaiming starts the claim loops of every queue, under ctx (Run's).
func (w *Worker) startClaiming(ctx context.Context) {
	qs := w.queues
	qs.mu.Lock()
	if qs.closed {
		qs.mu.Unlock()
		return
	}
	qs.ctx, qs.running = ctx, true
	for _, q := range qs.names {
		w.startLoop(q)
	}
	// Suspect tasks run alone (isolate.go) while claims run, and stop
	// with them.
	qs.wg.Go(func() { w.iso.run(ctx) })
	names := slices.Clone(qs.names)
	qs.mu.Unlock()
	if !slices.Equal(names, w.cfg.Queues) {
		w.recordQueues(names) // changed before Run
	}
}

// stopClaiming refuses further changes and waits for every claim loop, and
// every probe behind a claim cursor, to end (ctx, Run's, has ended).
func (w *Worker) stopClaiming() {
	qs := w.queues
	qs.mu.Lock()
	qs.closed, qs.running = true, false
	qs.mu.Unlock()
	qs.wg.Wait()
}

// startLoop starts the claim loop of q; qs.mu held.
func (w *Worker) startLoop(q string) {
	qs := w.queues
	qslots := w.limits.queueSlots[q]
	if n, ok := qs.conc[q]; ok {
		qslots = semaphore.NewWeighted(int64(n))
	}
	if qs.wakeChan(q) == nil {
		qs.setWake(q, make(chan struct{}, 1))
	}
	ctx, cancel := context.WithCancel(qs.ctx)
	loop := &queueLoop{cancel: cancel, done: make(chan struct{})}
	qs.loops[q] = loop
	qs.wg.Add(1)
	go func() {
		defer qs.wg.Done()
		defer close(loop.done)
		defer cancel()
		w.claimLoop(ctx, q, qslots)
	}()
}

// recordQueues writes the worker's queues in its row of skiplock_workers
// (what operators see). A failure is logged: the row is informative.
func (w *Worker) recordQueues(names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := w.queries.WorkerSetQueues(ctx, w.pool, db.WorkerSetQueuesParams{ID: w.cfg.WorkerID, Queues: names})
	if err != nil {
		w.log.Warn("skiplock: recording the worker's queues", "error", err)
	}
}
