package worker

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/db"
)

// A worker claims only the names it has handlers for (claimLimits.rest),
// so a task whose name no running worker handles stays pending, its
// attempts unspent, until one that handles it starts. This file watches
// for such tasks in the worker's queues: it logs them once, when the set
// of names changes, never per claim; and it tells the claim loop that a
// queue holds rows it walks past without taking (cursor.go's carry).

const (
	// unhandledEvery is how often the worker looks at the head of its
	// queues for names it has no handler for.
	unhandledEvery = 30 * time.Second
	// unhandledScan is how many due rows of a queue, from the head in
	// claim order, one look reads at most.
	unhandledScan = 10000
)

// unhandledWatch is what the last look found; its zero value is ready.
type unhandledWatch struct {
	mu     sync.Mutex
	queues map[string][]string // queue -> names it has no handler for, sorted
	logged bool                // the last look found some, and said so
}

// has reports whether the last look found rows in queueName whose names
// the worker has no handler for.
func (u *unhandledWatch) has(queueName string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.queues[queueName]) > 0
}

// watchUnhandled looks at the head of the worker's queues at start and
// every unhandledEvery until ctx ends.
func (w *Worker) watchUnhandled(ctx context.Context) {
	t := time.NewTicker(unhandledEvery)
	defer t.Stop()
	for {
		w.lookUnhandled(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lookUnhandled reads, per queue, the names of due tasks at the head of the
// queue that the worker has no handler for, and logs when that set
// changes: a warning naming them while there are some, one line when they
// are gone.
func (w *Worker) lookUnhandled(ctx context.Context) {
	found := map[string][]string{}
	for _, q := range w.Queues() {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rows, err := w.queries.TaskUnhandledHead(qctx, w.pool, db.TaskUnhandledHeadParams{
			Queue: q, Scan: unhandledScan, Handled: nonNil(w.handled),
		})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.log.Debug("skiplock: looking for tasks without a handler", "queue", q, "error", err)
			}
			return // look again next time, rather than report half
		}
		if len(rows) == 0 {
			continue
		}
		found[q] = rows
	}
	u := &w.unhandled
	u.mu.Lock()
	changed := !maps.EqualFunc(u.queues, found, slices.Equal[[]string])
	u.queues = found
	wasLogged := u.logged
	u.logged = len(found) > 0
	u.mu.Unlock()
	switch {
	case !changed:
	case len(found) > 0:
		var each []string
		for _, q := range slices.Sorted(maps.Keys(found)) {
			each = append(each, q+": "+strings.Join(found[q], ", "))
		}
		w.log.Warn("skiplock: pending tasks in this worker's queues have names it has no handler for; "+
			"they stay pending, attempts unspent, until a worker that handles them runs",
			"unhandled", strings.Join(each, "; "), "handles", strings.Join(w.handled, ", "))
	case wasLogged:
		w.log.Info("skiplock: no pending task of this worker's queues waits for a handler it lacks any more")
	}
}
