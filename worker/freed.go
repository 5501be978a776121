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
// work channel with an empty payload, sent once the place is free: in
// advisory mode after the claim this worker makes at once, which carries
// the task's outcome (handoff.go) or its unlock and may take the place
// again, in which case nothing is announced; in lease mode after the
// outcome write. Without it, a freed
// place waited for the poll: PollInterval, a second by default. The sender
// does not wake itself again when it hears its own (ownFreed).

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
// The worker's own loops were woken when the place was freed, so its
// listener passes over this one (ownFreed).
func (w *Worker) sendFreed(ctx context.Context) error {
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	pid := conn.Conn().PgConn().PID()
	w.ownFreed.sending(pid)
	return w.queries.QueueNotify(ctx, conn, db.QueueNotifyParams{Channel: w.channel, Queues: []string{""}})
}

// ownFreedTTL is how long an announcement of the worker's own may take to
// come back to its listener: one that has not by then (sent while the
// listener was reconnecting, say) is forgotten, so that a backend process
// that reuses the pid later is heard.
const ownFreedTTL = time.Second

// ownFreed recognises the worker's own announcements when its listener
// receives them, by the pid of the backend that sent them: each woke every
// claim loop of every worker, its sender's too, whose claim then took
// nothing (its loops had claimed already). Under 3 exclusive keys worked by
// 3 workers, 10 ms tasks, that was one claim of four per freed place.
type ownFreed struct {
	mu   sync.Mutex
	sent map[uint32][]time.Time // by backend pid, oldest first
}

// sending records an announcement about to be sent from backend pid.
func (o *ownFreed) sending(pid uint32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sent == nil {
		o.sent = map[uint32][]time.Time{}
	}
	o.sent[pid] = append(o.sent[pid], time.Now())
}

// own reports whether a notification with an empty payload from backend
// pid is one of the worker's own announcements, and forgets it. A backend
// sends its notifications in order, one per transaction.
func (o *ownFreed) own(pid uint32) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	for p, ts := range o.sent {
		for len(ts) > 0 && now.Sub(ts[0]) > ownFreedTTL {
			ts = ts[1:]
		}
		if len(ts) == 0 {
			delete(o.sent, p)
		} else {
			o.sent[p] = ts
		}
	}
	ts := o.sent[pid]
	if len(ts) == 0 {
		return false
	}
	if len(ts) == 1 {
		delete(o.sent, pid)
	} else {
		o.sent[pid] = ts[1:]
	}
	return true
}
