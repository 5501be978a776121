package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/control"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Channels returns the NOTIFY channels of the schema skiplock_tasks lives
// in: work carries queue names (new work, resumed queues), control carries
// commands to workers (internal/control). Identifiers are cut at 63 bytes, as
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
		row, err := c.queries.SchemaTaskTable(ctx, c.exec)
		if errors.Is(err, pgerr.ErrNotFound) {
			return "", "", ErrNotMigrated
		}
		if err != nil {
			return "", "", err
		}
		c.schema.schema = row.Schema
	}
	work, control = Channels(c.schema.schema)
	return work, control, nil
}

// PauseQueue stops every worker from claiming tasks of the queue, from its
// next claim on (within PollInterval at most). Running tasks finish.
func (c *Client) PauseQueue(ctx context.Context, name string) error {
	if err := c.queries.QueuePause(ctx, c.exec, name); err != nil {
		return fmt.Errorf("pausing queue %q: %w", name, err)
	}
	return nil
}

// ResumeQueue lets workers claim tasks of the queue again and wakes them.
func (c *Client) ResumeQueue(ctx context.Context, name string) error {
	work, _, err := c.channels(ctx)
	if err != nil {
		return fmt.Errorf("resuming queue %q: %w", name, err)
	}
	err = c.inTx(ctx, func(tx pgerr.Executor) error {
		if err := c.queries.QueueResume(ctx, tx, name); err != nil {
			return err
		}
		return c.queries.QueueNotify(ctx, tx, db.QueueNotifyParams{Channel: work, Queues: []string{name}})
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
	_, ctlChannel, err := c.channels(ctx)
	if err != nil {
		return nil, fmt.Errorf("cancelling running tasks: %w", err)
	}
	var running []int64
	err = c.inTx(ctx, func(tx pgerr.Executor) error {
		running, err = c.queries.TaskRequestCancel(ctx, tx, ids)
		if err != nil || len(running) == 0 {
			return err
		}
		msgs := make([]string, len(running))
		for i, id := range running {
			msgs[i] = control.Cancel(id)
		}
		return c.queries.QueueNotify(ctx, tx, db.QueueNotifyParams{Channel: ctlChannel, Queues: msgs})
	})
	if err != nil {
		return nil, fmt.Errorf("cancelling running tasks: %w", err)
	}
	return running, nil
}

// CancelRunningMatching asks the workers running the tasks f selects to
// cancel them, as CancelRunning does for named tasks, and returns how many
// it asked. f.Statuses may be empty or StatusRunning. Running tasks are few
// (each holds a worker's slot), so it reads them in pages of MaxListLimit;
// a task that finishes meanwhile gets no request. On error, the count is of
// the pages asked before it.
func (c *Client) CancelRunningMatching(ctx context.Context, f Filter) (int64, error) {
	running := []Status{StatusRunning}
	if _, err := f.statuses("cancel running", running, running); err != nil {
		return 0, err
	}
	f.Statuses = running
	var requested, before int64
	for {
		tasks, err := c.List(ctx, ListFilter{Filter: f, Limit: MaxListLimit, BeforeID: before})
		if err != nil || len(tasks) == 0 {
			return requested, err
		}
		ids := make([]int64, len(tasks))
		for i, t := range tasks {
			ids[i] = t.ID
		}
		got, err := c.CancelRunning(ctx, ids)
		requested += int64(len(got))
		if err != nil {
			return requested, err
		}
		before = ids[len(ids)-1]
	}
}
