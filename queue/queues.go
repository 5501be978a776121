package queue

import (
	"context"
	"fmt"

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
