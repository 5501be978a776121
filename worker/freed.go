package worker

import (
	"context"
	"sync"
	"time"

	"github.com/skiplock/skiplock/db"
)

// A task that held a place another task may be waiting for, a slot of a
// concurrency limit (queue.Limit) or its exclusive key, frees it when it
// ends. Claim loops that took fewer tasks than they asked idle until a
// notification or the poll, so the end of such a task ("gated",
// execution.gated) is told to them: this worker's loops at once
// (completer.wakeClaims), every other worker's by a notification of the
// work channel with an empty payload, sent once the place is free (after
// the slot locks' unlock has run in advisory mode, after the outcome write
// in lease mode). Without it, a freed place waited for the poll:
// PollInterval, a second by default.

// freedAnnouncer sends the notifications, one at a time: announcements
// that arrive while one is being sent are told by one more, not one each.
type freedAnnouncer struct {
	send func(ctx context.Context) error

	mu      sync.Mutex
	sending bool
	again   bool
}

// announce tells every worker that a place is free. It never blocks.
func (a *freedAnnouncer) announce() {
	a.mu.Lock()
	if a.send == nil {
		a.mu.Unlock()
		return
	}
	if a.sending {
		a.again = true
		a.mu.Unlock()
		return
	}
	a.sending = true
	a.mu.Unlock()
	go func() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			// A failure is not worth a log line: the poll finds the place.
			_ = a.send(ctx)
			cancel()
			a.mu.Lock()
			if !a.again {
				a.sending = false
				a.mu.Unlock()
				return
			}
			a.again = false
			a.mu.Unlock()
		}
	}()
}

// sendFreed is the worker's announcement: an empty payload on the work
// channel wakes every claim loop of every worker of the schema (Worker.wake).
func (w *Worker) sendFreed(ctx context.Context) error {
	return w.queries.QueueNotify(ctx, w.pool, db.QueueNotifyParams{Channel: w.channel, Queues: []string{""}})
}
