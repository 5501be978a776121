package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Channels returns the NOTIFY channels of the schema skiplock_tasks lives
// in: work carries queue names (new work, resumed queues), control carries
// commands to workers ("cancel:<id>"). Identifiers are cut at 63 bytes, as
// PostgreSQL cuts them.
func Channels(schema string) (work, control string) {
	return cut63("skiplock_" + schema), cut63("skiplock_ctl_" + schema)
}

func cut63(s string) string {
	if len(s) > 63 {
		return s[:63]
	}
	return s
}

// schemaCache resolves the client's schema once.
type schemaCache struct {
	mu     sync.Mutex
	schema string
}

func (c *Client) channels(ctx context.Context) (work, control string, err error) {
	c.schema.mu.Lock()
	defer c.schema.mu.Unlock()
	if c.schema.schema == "" {
		row, err := c.queries.SchemaTaskTable(ctx, c.pool)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", "", ErrNotMigrated
		}
		if err != nil {
			return "", "", pgerr.Wrap(err)
		}
		c.schema.schema = row.Schema
	}
	work, control = Channels(c.schema.schema)
	return work, control, nil
}

// PauseQueue stops every worker from claiming tasks of the queue, from its
// next claim on (within PollInterval at most). Running tasks finish.
func (c *Client) PauseQueue(ctx context.Context, name string) error {
	if err := c.queries.QueuePause(ctx, c.pool, name); err != nil {
		return fmt.Errorf("pausing queue %q: %w", name, pgerr.Wrap(err))
	}
	return nil
}

// ResumeQueue lets workers claim tasks of the queue again and wakes them.
func (c *Client) ResumeQueue(ctx context.Context, name string) error {
	work, _, err := c.channels(ctx)
	if err != nil {
		return fmt.Errorf("resuming queue %q: %w", name, err)
	}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := c.queries.QueueResume(ctx, tx, name); err != nil {
			return err
		}
		return c.queries.QueueNotify(ctx, tx, db.QueueNotifyParams{Channel: work, Queues: []string{name}})
	})
	if err != nil {
		return fmt.Errorf("resuming queue %q: %w", name, pgerr.Wrap(err))
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
	rows, err := c.queries.QueueListPaused(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("listing paused queues: %w", pgerr.Wrap(err))
	}
	out := make([]PausedQueue, 0, len(rows))
	for _, r := range rows {
		out = append(out, PausedQueue{Name: r.Name, PausedAt: derefTime(r.PausedAt)})
	}
	return out, nil
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// CancelRunning asks the workers running the given tasks to cancel them:
// the handler's context is cancelled at once on whichever machine runs it
// (NOTIFY, with a poll as fallback). A handler that then returns an error
// leaves its task cancelled; one that returns nil completes it. It returns
// the IDs that were running; others are not touched (see Cancel for pending
// and failed tasks).
func (c *Client) CancelRunning(ctx context.Context, ids []int64) ([]int64, error) {
	_, control, err := c.channels(ctx)
	if err != nil {
		return nil, fmt.Errorf("cancelling running tasks: %w", err)
	}
	var running []int64
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		running, err = c.queries.TaskRequestCancel(ctx, tx, ids)
		if err != nil || len(running) == 0 {
			return err
		}
		msgs := make([]string, len(running))
		for i, id := range running {
			msgs[i] = "cancel:" + strconv.FormatInt(id, 10)
		}
		return c.queries.QueueNotify(ctx, tx, db.QueueNotifyParams{Channel: control, Queues: msgs})
	})
	if err != nil {
		return nil, fmt.Errorf("cancelling running tasks: %w", pgerr.Wrap(err))
	}
	return running, nil
}
