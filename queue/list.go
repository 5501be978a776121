package queue

import (
	"context"
	"fmt"
	"slices"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Reading tasks: List, and counting them for the operator tools.

// Defaults and limits of List.
const (
	// DefaultListLimit is how many tasks List returns when Limit is zero.
	DefaultListLimit = 50
	// MaxListLimit bounds ListFilter.Limit.
	MaxListLimit = 10000
)

// ListFilter selects tasks for List.
type ListFilter struct {
	Filter
	// IDs keeps only these tasks.
	IDs []int64
	// Phases keeps tasks in any of these phases, in addition to those in
	// Filter.Statuses: PhaseRetrying and PhaseScheduled select pending tasks
	// by why they wait, PhaseDue the pending tasks that are due. With
	// StatusPending in Statuses every pending task matches anyway.
	Phases []Phase
	// Limit bounds how many tasks List returns. Defaults to
	// DefaultListLimit (50), at most MaxListLimit (10,000).
	Limit int
	// BeforeID keeps tasks with smaller IDs: pass the last ID of a page to
	// get the next one.
	BeforeID int64
	// Sequence keeps the tasks of this sequence (WithSequence).
	Sequence string
}

// selection turns the statuses and phases of f into the statuses to read
// and the kinds of pending tasks to keep (none: every pending task).
func (f ListFilter) selection(op string) (statuses, waits []string, err error) {
	if len(f.Sequence) > MaxKeyLength {
		return nil, nil, fmt.Errorf("%w: sequence key must be at most %d bytes, got %d", ErrInvalidRequest, MaxKeyLength, len(f.Sequence))
	}
	if len(f.Phases) == 0 {
		statuses, err = f.statuses(op, Statuses, Statuses)
		return statuses, nil, err
	}
	if len(f.Statuses) > 0 {
		if statuses, err = f.statuses(op, Statuses, nil); err != nil {
			return nil, nil, err
		}
	}
	allPending := slices.Contains(statuses, string(StatusPending))
	for _, st := range f.Phases {
		status, wait := string(st), ""
		switch st {
		case PhaseDue:
			status, wait = string(StatusPending), "due"
		case PhaseRetrying, PhaseScheduled:
			status, wait = string(StatusPending), string(st)
		case PhaseRunning, PhaseCompleted, PhaseFailed, PhaseCancelled:
		default:
			return nil, nil, fmt.Errorf("%w: unknown phase %q", ErrInvalidRequest, st)
		}
		if !slices.Contains(statuses, status) {
			statuses = append(statuses, status)
		}
		if wait != "" && !allPending && !slices.Contains(waits, wait) {
			waits = append(waits, wait)
		}
	}
	return statuses, waits, nil
}

// Validate returns the error, wrapping ErrInvalidRequest, that List would
// return for f before reading anything; nil when f is valid.
func (f ListFilter) Validate() error {
	_, _, _, err := f.check()
	return err
}

// check validates f for List and returns its selection and limit.
func (f ListFilter) check() (statuses, waits []string, limit int, err error) {
	if statuses, waits, err = f.selection("list"); err != nil {
		return nil, nil, 0, err
	}
	limit = f.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 0 || limit > MaxListLimit {
		return nil, nil, 0, fmt.Errorf("%w: limit must be 1 to %d, got %d", ErrInvalidRequest, MaxListLimit, f.Limit)
	}
	return statuses, waits, limit, nil
}

// List returns the tasks that match f, newest (highest ID) first.
func (c *Client) List(ctx context.Context, f ListFilter) ([]*Task, error) {
	return c.list(ctx, c.exec, f)
}

// ListTx is List within tx: it sees the tasks tx enqueued and has not
// committed yet, as well as the committed ones.
func (c *Client) ListTx(ctx context.Context, tx Executor, f ListFilter) ([]*Task, error) {
	return c.list(ctx, pgerr.Interpreting(tx), f)
}

func (c *Client) list(ctx context.Context, exec db.DBTX, f ListFilter) ([]*Task, error) {
	statuses, waits, limit, err := f.check()
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
		BeforeID:       f.BeforeID,
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

// count returns how many tasks match f (its Limit and BeforeID aside), for
// the operator tools (internal/ops.Count, through internal/clientaccess).
func (c *Client) count(ctx context.Context, f ListFilter) (int64, error) {
	statuses, waits, err := f.selection("count")
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
