package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/queue"
)

// The known queues: their backlog, whether they exist, which are paused.

// PausedQueue is a paused queue and since when.
type PausedQueue struct {
	Name     string
	PausedAt time.Time
}

// PausedQueues lists the paused queues.
func PausedQueues(ctx context.Context, c *queue.Client) ([]PausedQueue, error) {
	rows, err := queries.QueueListPaused(ctx, exec(c))
	if err != nil {
		return nil, fmt.Errorf("listing paused queues: %w", err)
	}
	out := make([]PausedQueue, 0, len(rows))
	for _, r := range rows {
		out = append(out, PausedQueue{Name: r.Name, PausedAt: deref(r.PausedAt)})
	}
	return out, nil
}

// QueueInfo is a known queue: its backlog and whether it is paused.
type QueueInfo struct {
	Name string
	// Pending counts every pending task: Due + Retrying + Scheduled.
	Pending   int64
	Due       int64
	Retrying  int64
	Scheduled int64
	// OldestDue is how long the oldest due task has waited past its run
	// time; zero when none is due.
	OldestDue time.Duration
	Running   int64
	Failed    int64
	// PausedAt is when the queue was paused; nil when it is not.
	PausedAt *time.Time
}

// Queues lists the known queues by name: every queue that has tasks, in any
// status, or that was ever paused. It reads indexes whose size is the
// backlog, not the table's history, so it is cheap enough to call often.
func Queues(ctx context.Context, c *queue.Client) ([]QueueInfo, error) {
	rows, err := queries.QueueList(ctx, exec(c))
	if err != nil {
		return nil, fmt.Errorf("listing queues: %w", err)
	}
	out := make([]QueueInfo, len(rows))
	for i, r := range rows {
		out[i] = QueueInfo{
			Name: r.Queue, Pending: r.Pending, Due: r.Due, Retrying: r.Retrying, Scheduled: r.Scheduled,
			OldestDue: seconds(r.OldestDueSeconds), Running: r.Running, Failed: r.Failed, PausedAt: r.PausedAt,
		}
	}
	return out, nil
}

// QueueExists reports whether a queue is known: it has tasks, in any
// status, or was paused once. PauseQueue does not ask (a queue may be
// paused before its first task); operator tools do, so that a typo does not
// pause a queue nobody uses.
func QueueExists(ctx context.Context, c *queue.Client, name string) (bool, error) {
	known, err := queries.QueueKnown(ctx, exec(c), name)
	if err != nil {
		return false, fmt.Errorf("looking up queue %q: %w", name, err)
	}
	return known, nil
}
