package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// The known queues, and pausing and resuming them.

// PauseQueue stops every worker from claiming tasks of the queue, from its
// next claim on (within PollInterval at most). Running tasks finish. The
// change and its audit record are one transaction.
func (c *Client) PauseQueue(ctx context.Context, name string) error {
	a, err := c.newAudit(ctx, nil, AuditPause, map[string]any{"queue": name})
	if err != nil {
		return err
	}
	err = a.once(ctx, func(tx pgerr.Executor) (int64, error) {
		return 1, c.queries.QueuePause(ctx, tx, name)
	})
	if err != nil {
		return fmt.Errorf("pausing queue %q: %w", name, err)
	}
	return nil
}

// ResumeQueue lets workers claim tasks of the queue again and wakes them.
// The change and its audit record are one transaction.
func (c *Client) ResumeQueue(ctx context.Context, name string) error {
	a, err := c.newAudit(ctx, nil, AuditResume, map[string]any{"queue": name})
	if err != nil {
		return err
	}
	work, _, err := c.channels(ctx)
	if err != nil {
		return fmt.Errorf("resuming queue %q: %w", name, err)
	}
	err = a.once(ctx, func(tx pgerr.Executor) (int64, error) {
		if err := c.queries.QueueResume(ctx, tx, name); err != nil {
			return 0, err
		}
		return 1, c.queries.QueueNotify(ctx, tx, db.QueueNotifyParams{Channel: work, Queues: []string{name}})
	})
	if err != nil {
		return fmt.Errorf("resuming queue %q: %w", name, err)
	}
	return nil
}

// PausedQueue is a paused queue and since when.
type PausedQueue struct {
	Name     string
	PausedAt time.Time
}

// PausedQueues lists the paused queues.
func (c *Client) PausedQueues(ctx context.Context) ([]PausedQueue, error) {
	rows, err := c.queries.QueueListPaused(ctx, c.exec)
	if err != nil {
		return nil, fmt.Errorf("listing paused queues: %w", err)
	}
	out := make([]PausedQueue, 0, len(rows))
	for _, r := range rows {
		out = append(out, PausedQueue{Name: r.Name, PausedAt: derefTime(r.PausedAt)})
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
func (c *Client) Queues(ctx context.Context) ([]QueueInfo, error) {
	rows, err := c.queries.QueueList(ctx, c.exec)
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
func (c *Client) QueueExists(ctx context.Context, name string) (bool, error) {
	known, err := c.queries.QueueKnown(ctx, c.exec, name)
	if err != nil {
		return false, fmt.Errorf("looking up queue %q: %w", name, err)
	}
	return known, nil
}
