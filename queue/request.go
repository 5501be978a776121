package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/skiplock/skiplock/internal/pgerr"
)

// Operator methods: the skiplock command and the dashboard inspect and
// change tasks through these. This file holds what they share: the
// validation error, Filter, bulk batches, named IDs and the result of a
// change (ChangeResult), and conversions to and from the rows.

// MaxBatch bounds the BatchSize of bulk requests.
const MaxBatch = 100000

// ErrInvalidRequest wraps every validation error of the operator methods
// (List, Requeue, Cancel, RunNow, Delete, Purge): an unknown status, a
// status the operation does not apply to, a batch size out of range, no
// task named. Nothing was read or changed.
var ErrInvalidRequest = errors.New("skiplock: invalid request")

// Filter selects tasks. Every field is optional; an empty field matches
// every task, and the fields that are set must all match.
type Filter struct {
	// Statuses keeps tasks in any of these statuses. Each operation has its
	// own default and accepts only some statuses; see its request.
	Statuses []Status
	// Queues keeps tasks in any of these queues.
	Queues []string
	// Names keeps tasks with any of these names.
	Names []string
	// Since keeps tasks that finished at or after it; tasks that have not
	// finished (pending, running) match when they were created at or after
	// it.
	Since time.Time
	// FinishedBefore keeps tasks that finished before it; tasks that have
	// not finished never match.
	FinishedBefore time.Time
	// ErrorContains keeps tasks whose last recorded error contains it,
	// ignoring case.
	ErrorContains string
}

func (f Filter) isZero() bool {
	return len(f.Statuses) == 0 && len(f.Queues) == 0 && len(f.Names) == 0 &&
		f.Since.IsZero() && f.FinishedBefore.IsZero() && f.ErrorContains == ""
}

// statuses validates f.Statuses against allowed and returns them as text,
// or def when f.Statuses is empty.
func (f Filter) statuses(op string, allowed, def []Status) ([]string, error) {
	in := f.Statuses
	if len(in) == 0 {
		in = def
	}
	out := make([]string, 0, len(in))
	for _, s := range in {
		if !slices.Contains(Statuses, s) {
			return nil, fmt.Errorf("%w: unknown status %q (want one of %s)", ErrInvalidRequest, s, joinStatuses(Statuses))
		}
		if !slices.Contains(allowed, s) {
			return nil, fmt.Errorf("%w: %s applies to %s tasks, not %s", ErrInvalidRequest, op, joinStatuses(allowed), s)
		}
		if !slices.Contains(out, string(s)) {
			out = append(out, string(s))
		}
	}
	return out, nil
}

func joinStatuses(ss []Status) string {
	out := ""
	for i, s := range ss {
		switch {
		case i == 0:
		case i == len(ss)-1:
			out += " or "
		default:
			out += ", "
		}
		out += string(s)
	}
	return out
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// SkippedTask is a task named in a request that the request did not change.
type SkippedTask struct {
	ID int64
	// Status is the task's status after the request; empty when no task has
	// the ID.
	Status Status
}

func batchSize(n, def int) (int, error) {
	if n == 0 {
		return def, nil
	}
	if n < 0 || n > MaxBatch {
		return 0, fmt.Errorf("%w: batch size must be 1 to %d, got %d", ErrInvalidRequest, MaxBatch, n)
	}
	return n, nil
}

// checkIDs validates the IDs of a request and returns them sorted, without
// duplicates.
func checkIDs(ids []int64, f Filter) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rest := f
	rest.Statuses = nil
	if !rest.isZero() {
		return nil, fmt.Errorf("%w: a request that names IDs takes no filter but Statuses", ErrInvalidRequest)
	}
	out := slices.Clone(ids)
	slices.Sort(out)
	out = slices.Compact(out)
	if out[0] <= 0 {
		return nil, fmt.Errorf("%w: task ID %d is not positive", ErrInvalidRequest, out[0])
	}
	return out, nil
}

// skipped reports the requested tasks that are not in done (both sorted).
func (c *Client) skipped(ctx context.Context, x pgerr.Executor, requested, done []int64) ([]SkippedTask, error) {
	var rest []int64
	for _, id := range requested {
		if _, found := slices.BinarySearch(done, id); !found {
			rest = append(rest, id)
		}
	}
	out := []SkippedTask{}
	if len(rest) == 0 {
		return out, nil
	}
	rows, err := c.queries.TaskStatusMany(ctx, x, rest)
	if err != nil {
		return out, fmt.Errorf("reading task statuses: %w", err)
	}
	status := make(map[int64]Status, len(rows))
	for _, r := range rows {
		status[r.ID] = Status(r.Status)
	}
	for _, id := range rest {
		out = append(out, SkippedTask{ID: id, Status: status[id]})
	}
	return out, nil
}

func seconds(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// ChangeResult reports what a bulk operator change did. Requeue, Cancel,
// RunNow, Delete and Purge, their Tx variants and ShardedClient's all
// return it.
//
// The changes take their tasks the same way: named by IDs, every one of
// them reported (changed, or skipped with its status), or selected by a
// Filter, counted. Requeue and Cancel take either; RunNow and Delete take
// IDs only, since a filter's sweep would make a whole backlog due at once,
// or delete work not yet done, and Purge (the deletion by filter) keeps to
// finished tasks and takes a Filter only.
type ChangeResult struct {
	// Changed is how many tasks the change changed: requeued, cancelled,
	// made due, deleted. On error, how many the batches committed before
	// it changed.
	Changed int64
	// IDs lists the changed tasks, in order, when the request named IDs;
	// nil for a Filter, which may select millions.
	IDs []int64
	// Skipped lists the named tasks that were not changed, in order, with
	// their status (empty when no task has the ID); nil for a Filter.
	Skipped []SkippedTask
	// Requested lists, in order, the running tasks whose workers were
	// asked to cancel them (a Cancel whose statuses include
	// StatusRunning), named or selected by a Filter: running tasks are
	// few, each holds a worker's slot. They are not counted in Changed;
	// named, they are in Skipped too, as running.
	Requested []int64
}

// namedIDs validates the IDs of a change of named tasks: at least one, all
// positive; sorted, without duplicates.
func namedIDs(ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: name at least one task", ErrInvalidRequest)
	}
	return checkIDs(ids, Filter{})
}
