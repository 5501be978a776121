package queue

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/defaults"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Reading tasks: List, and counting them for the operator tools.

// MaxListLimit bounds Page.Limit.
const MaxListLimit = 10000

// Page says which page of the tasks a Filter selects List returns: at most
// Limit of them, newest first, below BeforeID. The zero Page is the first
// 50 tasks.
type Page struct {
	// Limit bounds how many tasks List returns. Defaults to
	// 50, at most MaxListLimit (10,000).
	Limit int
	// BeforeID keeps tasks with smaller IDs: pass the last ID of a page to
	// get the next one.
	BeforeID int64
}

// Validate returns the error, wrapping ErrInvalidRequest, that List would
// return for p before reading anything; nil when p is valid.
func (p Page) Validate() error {
	_, err := p.limit()
	return err
}

func (p Page) limit() (int, error) {
	if p.Limit == 0 {
		return defaults.ListLimit, nil
	}
	if p.Limit < 0 || p.Limit > MaxListLimit {
		return 0, fmt.Errorf("%w: limit must be 1 to %d, got %d", ErrInvalidRequest, MaxListLimit, p.Limit)
	}
	if p.BeforeID < 0 {
		return 0, fmt.Errorf("%w: before ID must not be negative, got %d", ErrInvalidRequest, p.BeforeID)
	}
	return p.Limit, nil
}

// List returns one page of the tasks that f selects, newest (highest ID)
// first. Each task's Status is as of when it was read.
func (c *Client) List(ctx context.Context, f Filter, p Page) ([]*Task, error) {
	return c.list(ctx, c.exec, f, p)
}

// ListTx is List within tx: it sees the tasks tx enqueued and has not
// committed yet, as well as the committed ones.
func (c *Client) ListTx(ctx context.Context, tx Executor, f Filter, p Page) ([]*Task, error) {
	return c.list(ctx, pgerr.Interpreting(tx), f, p)
}

func (c *Client) list(ctx context.Context, exec db.DBTX, f Filter, p Page) ([]*Task, error) {
	statuses, waits, err := f.selection("list", Statuses, Statuses)
	if err != nil {
		return nil, err
	}
	limit, err := p.limit()
	if err != nil {
		return nil, err
	}
	rows, err := c.queries.TaskList(ctx, exec, db.TaskListParams{
		Statuses:       statuses,
		Ids:            nonNil(f.IDs),
		Queues:         nonNil(f.Queues),
		Names:          nonNil(f.Names),
		Since:          optTime(f.Since),
		FinishedBefore: optTime(f.FinishedBefore),
		ErrorContains:  optString(f.ErrorContains),
		Waits:          nonNil(waits),
		SequenceKey:    optString(f.Sequence),
		BeforeID:       p.BeforeID,
		MaxRows:        int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("listing tasks: %w", err)
	}
	tasks := make([]*Task, 0, len(rows))
	for _, r := range rows {
		t, err := taskFromRow(r)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// count returns how many tasks f selects, for the operator tools
// (internal/ops.Count, through internal/clientaccess).
func (c *Client) count(ctx context.Context, f Filter) (int64, error) {
	statuses, waits, err := f.selection("count", Statuses, Statuses)
	if err != nil {
		return 0, err
	}
	p := db.TaskCountParams{
		Statuses:       statuses,
		Ids:            nonNil(f.IDs),
		Queues:         nonNil(f.Queues),
		Names:          nonNil(f.Names),
		Since:          optTime(f.Since),
		FinishedBefore: optTime(f.FinishedBefore),
		ErrorContains:  optString(f.ErrorContains),
		Waits:          nonNil(waits),
	}
	var n int64
	if f.Sequence == "" {
		// TaskCount reads no sequence column: `skiplock migrate down`
		// counts with it on older schemas.
		n, err = c.queries.TaskCount(ctx, c.exec, p)
	} else {
		n, err = c.queries.TaskCountInSequence(ctx, c.exec, db.TaskCountInSequenceParams{
			Statuses: p.Statuses, Ids: p.Ids, Queues: p.Queues, Names: p.Names, Since: p.Since,
			FinishedBefore: p.FinishedBefore, ErrorContains: p.ErrorContains, Waits: p.Waits, SequenceKey: f.Sequence,
		})
	}
	if err != nil {
		return 0, fmt.Errorf("counting tasks: %w", err)
	}
	return n, nil
}
