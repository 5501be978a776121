package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/migrations"
)

// Operator methods: the skiplock command and the dashboard inspect tasks and
// requeue, cancel and purge them through these.

// Defaults and limits of the operator methods.
const (
	// DefaultListLimit is how many tasks List returns when Limit is zero.
	DefaultListLimit = 50
	// MaxListLimit bounds ListFilter.Limit.
	MaxListLimit = 10000
	// DefaultRequeueBatch is how many tasks one requeue transaction changes.
	DefaultRequeueBatch = 5000
	// DefaultCancelBatch is how many tasks one cancel transaction changes.
	DefaultCancelBatch = 5000
	// DefaultPurgeBatch is how many tasks one purge transaction deletes.
	DefaultPurgeBatch = 10000
	// MaxBatch bounds the BatchSize of bulk requests.
	MaxBatch = 100000
	// DefaultRequeueReason is recorded in the history of a requeued task when
	// RequeueRequest.Reason is empty.
	DefaultRequeueReason = "requeued"
)

// ErrInvalidRequest wraps every validation error of the operator methods
// (List, Count, Requeue, Cancel, Purge): an unknown status, a status the
// operation does not apply to, a batch size out of range. Nothing was read
// or changed.
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

// ListFilter selects tasks for List and Count.
type ListFilter struct {
	Filter
	// IDs keeps only these tasks.
	IDs []int64
	// States keeps tasks in any of these states, in addition to those in
	// Filter.Statuses: StateRetrying and StateScheduled select pending tasks
	// by why they wait, StateDue the pending tasks that are due. With
	// StatusPending in Statuses every pending task matches anyway.
	States []State
	// Limit bounds how many tasks List returns. Defaults to
	// DefaultListLimit (50), at most MaxListLimit (10,000). Count ignores it.
	Limit int
	// BeforeID keeps tasks with smaller IDs: pass the last ID of a page to
	// get the next one. Count ignores it.
	BeforeID int64
	// Sequence keeps the tasks of this sequence (WithSequence).
	Sequence string
}

// selection turns the statuses and states of f into the statuses to read
// and the kinds of pending tasks to keep (none: every pending task).
func (f ListFilter) selection(op string) (statuses, waits []string, err error) {
	if len(f.Sequence) > MaxKeyLength {
		return nil, nil, fmt.Errorf("%w: sequence key must be at most %d bytes, got %d", ErrInvalidRequest, MaxKeyLength, len(f.Sequence))
	}
	if len(f.States) == 0 {
		statuses, err = f.statuses(op, Statuses, Statuses)
		return statuses, nil, err
	}
	if len(f.Statuses) > 0 {
		if statuses, err = f.statuses(op, Statuses, nil); err != nil {
			return nil, nil, err
		}
	}
	allPending := slices.Contains(statuses, string(StatusPending))
	for _, st := range f.States {
		status, wait := string(st), ""
		switch st {
		case StateDue:
			status, wait = string(StatusPending), "due"
		case StateRetrying, StateScheduled:
			status, wait = string(StatusPending), string(st)
		case StateRunning, StateCompleted, StateFailed, StateCancelled:
		default:
			return nil, nil, fmt.Errorf("%w: unknown state %q", ErrInvalidRequest, st)
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

// Count returns how many tasks match f (its Limit and BeforeID aside).
func (c *Client) Count(ctx context.Context, f ListFilter) (int64, error) {
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

// SkippedTask is a task named in a request that the request did not change.
type SkippedTask struct {
	ID int64
	// Status is the task's status after the request; empty when no task has
	// the ID.
	Status Status
}

// RequeueRequest says which failed or cancelled tasks Requeue returns to
// pending. Name tasks with IDs, or select them with Filter.
type RequeueRequest struct {
	// IDs names the tasks to requeue. With IDs, only Filter.Statuses may be
	// set, and every named task is reported: requeued, or skipped with its
	// status.
	IDs []int64
	// Filter selects the tasks to requeue when IDs is empty. Its Statuses
	// may be StatusFailed and StatusCancelled; they default to failed only.
	Filter Filter
	// ResetAttempts starts a requeued task's attempts again from zero, so it
	// gets all its MaxAttempts again. Without it a task keeps its attempt
	// count, and MaxAttempts is raised if needed so that it gets at least
	// one more attempt.
	ResetAttempts bool
	// Reason is recorded as the error of the "requeued" entry appended to
	// each task's error history. Defaults to DefaultRequeueReason.
	Reason string
	// BatchSize bounds how many tasks one transaction requeues. Defaults to
	// DefaultRequeueBatch (5,000), at most MaxBatch.
	BatchSize int
	// Progress, if set, is called after each committed batch with the number
	// of tasks requeued so far.
	Progress func(requeued int64)
}

// RequeueResult reports what Requeue did.
type RequeueResult struct {
	// Requeued is how many tasks were returned to pending.
	Requeued int64
	// IDs lists the requeued tasks, in order, when the request named IDs.
	IDs []int64
	// Skipped lists the named tasks that were not requeued: not failed (or
	// cancelled, when asked), or not found.
	Skipped []SkippedTask
}

// Requeue returns failed (and, when asked, cancelled) tasks to pending, due
// now: finished_at and worker_id are cleared, and an entry with outcome
// "requeued" is appended to the error history, which is otherwise kept.
// Idle workers of the requeued queues are woken. A task goes to waiting
// instead while it has dependencies left (WithDependsOn), or while another
// task of its sequence (WithSequence) is pending, running, holding it
// (WithSequenceHold) or waiting ahead of it: it then runs in its turn.
//
// It works in batches of BatchSize tasks, each its own transaction, so a
// million tasks neither time out nor lock the table for long; Progress is
// told after each. It is safe while workers run: only tasks that are failed
// (or cancelled) when their batch locks them change, so a running task is
// never touched. Rows another transaction holds are skipped by a filter
// (they are being changed right now) and waited for when named by ID. On
// error, the result counts the batches committed before it.
func (c *Client) Requeue(ctx context.Context, req RequeueRequest) (RequeueResult, error) {
	return c.requeue(ctx, c.exec, req)
}

// RequeueTx is Requeue within tx: every batch runs in it, and workers are
// woken when it commits. Rolled back, it is a dry run: it reports what
// Requeue would do, decided by the same statements.
func (c *Client) RequeueTx(ctx context.Context, tx Executor, req RequeueRequest) (RequeueResult, error) {
	return c.requeue(ctx, pgerr.Interpreting(tx), req)
}

// Validate returns the error, wrapping ErrInvalidRequest, that Requeue
// would return for r before reading or changing anything; nil when r is
// valid. A tool calls it to refuse bad input before it connects.
func (r RequeueRequest) Validate() error {
	_, _, _, err := r.check()
	return err
}

// check validates r and returns its statuses, batch size and IDs.
func (r RequeueRequest) check() (statuses []string, batch int, ids []int64, err error) {
	if statuses, err = r.Filter.statuses("requeue", []Status{StatusFailed, StatusCancelled}, []Status{StatusFailed}); err != nil {
		return nil, 0, nil, err
	}
	if batch, err = batchSize(r.BatchSize, DefaultRequeueBatch); err != nil {
		return nil, 0, nil, err
	}
	ids, err = checkIDs(r.IDs, r.Filter)
	return statuses, batch, ids, err
}

func (c *Client) requeue(ctx context.Context, x pgerr.Executor, req RequeueRequest) (RequeueResult, error) {
	var res RequeueResult
	statuses, batch, ids, err := req.check()
	if err != nil {
		return res, err
	}
	reason := req.Reason
	if reason == "" {
		reason = DefaultRequeueReason
	}
	info, err := ReadSchema(ctx, x)
	if err != nil {
		return res, err
	}
	channel, _ := Channels(info.Name)
	progress := func() {
		if req.Progress != nil {
			req.Progress(res.Requeued)
		}
	}

	if len(ids) > 0 {
		res.IDs = []int64{}
		for chunk := range slices.Chunk(ids, batch) {
			row, err := c.queries.TaskRequeueMany(ctx, x, db.TaskRequeueManyParams{
				Ids: chunk, Statuses: statuses, ResetAttempts: req.ResetAttempts, Reason: reason, Channel: channel,
			})
			if err != nil {
				return res, fmt.Errorf("requeueing tasks: %w", err)
			}
			res.IDs = append(res.IDs, row.Ids...)
			res.Requeued += int64(len(row.Ids))
			progress()
		}
		res.Skipped, err = c.skipped(ctx, x, ids, res.IDs)
		return res, err
	}

	f := req.Filter
	var after int64
	for {
		row, err := c.queries.TaskRequeueBatch(ctx, x, db.TaskRequeueBatchParams{
			Statuses:       statuses,
			AfterID:        after,
			Queues:         nonNil(f.Queues),
			Names:          nonNil(f.Names),
			Since:          optTime(f.Since),
			FinishedBefore: optTime(f.FinishedBefore),
			ErrorContains:  optString(f.ErrorContains),
			BatchSize:      int32(batch),
			ResetAttempts:  req.ResetAttempts,
			Reason:         reason,
			Channel:        channel,
		})
		if err != nil {
			return res, fmt.Errorf("requeueing tasks: %w", err)
		}
		res.Requeued += row.Requeued
		if row.Picked > 0 {
			progress()
		}
		if row.Picked < int64(batch) {
			return res, nil
		}
		after = row.LastID
	}
}

// CancelRequest says which pending or failed tasks Cancel cancels. Name
// tasks with IDs, or select them with Filter.
type CancelRequest struct {
	// IDs names the tasks to cancel. With IDs, only Filter.Statuses may be
	// set, and every named task is reported: cancelled, or skipped with its
	// status.
	IDs []int64
	// Filter selects the tasks to cancel when IDs is empty; an empty Filter
	// selects every pending and failed task. Its Statuses may be
	// StatusPending and StatusFailed; they default to both.
	Filter Filter
	// BatchSize bounds how many tasks one transaction cancels. Defaults to
	// DefaultCancelBatch (5,000), at most MaxBatch.
	BatchSize int
	// Progress, if set, is called after each committed batch with the number
	// of tasks cancelled so far.
	Progress func(cancelled int64)
}

// CancelResult reports what Cancel did.
type CancelResult struct {
	// Cancelled is how many tasks were cancelled.
	Cancelled int64
	// IDs lists the cancelled tasks, in order, when the request named IDs.
	IDs []int64
	// Skipped lists the named tasks that were not cancelled: running,
	// completed, already cancelled, or not found.
	Skipped []SkippedTask
}

// Cancel cancels pending and failed tasks: they become cancelled, with
// finished_at set, and are never claimed again unless requeued. Running
// tasks are not changed. It works in batches like Requeue, with the same
// safety while workers run: a pending task that a worker claims first is
// running by the time its batch re-checks it, and is left alone.
func (c *Client) Cancel(ctx context.Context, req CancelRequest) (CancelResult, error) {
	return c.cancel(ctx, c.exec, req)
}

// CancelTx is Cancel within tx: every batch runs in it. Rolled back, it is
// a dry run: it reports what Cancel would do, decided by the same
// statements.
func (c *Client) CancelTx(ctx context.Context, tx Executor, req CancelRequest) (CancelResult, error) {
	return c.cancel(ctx, pgerr.Interpreting(tx), req)
}

// Validate returns the error, wrapping ErrInvalidRequest, that Cancel would
// return for r before reading or changing anything; nil when r is valid.
func (r CancelRequest) Validate() error {
	_, _, _, err := r.check()
	return err
}

// check validates r and returns its statuses, batch size and IDs.
func (r CancelRequest) check() (statuses []string, batch int, ids []int64, err error) {
	cancellable := []Status{StatusPending, StatusWaiting, StatusFailed}
	if statuses, err = r.Filter.statuses("cancel", cancellable, cancellable); err != nil {
		return nil, 0, nil, err
	}
	if batch, err = batchSize(r.BatchSize, DefaultCancelBatch); err != nil {
		return nil, 0, nil, err
	}
	ids, err = checkIDs(r.IDs, r.Filter)
	return statuses, batch, ids, err
}

func (c *Client) cancel(ctx context.Context, x pgerr.Executor, req CancelRequest) (CancelResult, error) {
	var res CancelResult
	statuses, batch, ids, err := req.check()
	if err != nil {
		return res, err
	}
	progress := func() {
		if req.Progress != nil {
			req.Progress(res.Cancelled)
		}
	}

	if len(ids) > 0 {
		res.IDs = []int64{}
		for chunk := range slices.Chunk(ids, batch) {
			done, err := c.queries.TaskCancelMany(ctx, x, db.TaskCancelManyParams{Ids: chunk, Statuses: statuses})
			if err != nil {
				return res, fmt.Errorf("cancelling tasks: %w", err)
			}
			res.IDs = append(res.IDs, done...)
			res.Cancelled += int64(len(done))
			progress()
		}
		slices.Sort(res.IDs)
		res.Skipped, err = c.skipped(ctx, x, ids, res.IDs)
		return res, err
	}

	f := req.Filter
	var after int64
	for {
		row, err := c.queries.TaskCancelBatch(ctx, x, db.TaskCancelBatchParams{
			Statuses:       statuses,
			AfterID:        after,
			Queues:         nonNil(f.Queues),
			Names:          nonNil(f.Names),
			Since:          optTime(f.Since),
			FinishedBefore: optTime(f.FinishedBefore),
			ErrorContains:  optString(f.ErrorContains),
			BatchSize:      int32(batch),
		})
		if err != nil {
			return res, fmt.Errorf("cancelling tasks: %w", err)
		}
		res.Cancelled += row.Cancelled
		if row.Picked > 0 {
			progress()
		}
		if row.Picked < int64(batch) {
			return res, nil
		}
		after = row.LastID
	}
}

// PurgeRequest says which finished tasks Purge deletes.
type PurgeRequest struct {
	// FinishedBefore is required: tasks that finished before it are deleted.
	FinishedBefore time.Time
	// Statuses may be StatusCompleted, StatusFailed and StatusCancelled;
	// they default to all three. Pending and running tasks are never
	// deleted.
	Statuses []Status
	// Queues, when set, keeps the purge to these queues.
	Queues []string
	// Names, when set, keeps the purge to tasks with these names.
	Names []string
	// BatchSize bounds how many tasks one transaction deletes. Defaults to
	// DefaultPurgeBatch (10,000), at most MaxBatch.
	BatchSize int
	// Progress, if set, is called after each committed batch with the number
	// of tasks deleted so far.
	Progress func(purged int64)
}

// Purge deletes finished tasks, with their history, in batches like
// Requeue. It returns how many it deleted; on error, how many the batches
// committed before it deleted.
func (c *Client) Purge(ctx context.Context, req PurgeRequest) (int64, error) {
	statuses, batch, err := req.check()
	if err != nil {
		return 0, err
	}
	var purged, after int64
	for {
		row, err := c.queries.TaskPurgeBatch(ctx, c.exec, db.TaskPurgeBatchParams{
			Statuses:       statuses,
			FinishedBefore: req.FinishedBefore,
			AfterID:        after,
			Queues:         nonNil(req.Queues),
			Names:          nonNil(req.Names),
			BatchSize:      int32(batch),
		})
		if err != nil {
			return purged, fmt.Errorf("purging tasks: %w", err)
		}
		purged += row.Deleted
		if row.Picked > 0 && req.Progress != nil {
			req.Progress(purged)
		}
		if row.Picked < int64(batch) {
			return purged, nil
		}
		after = row.LastID
	}
}

// Validate returns the error, wrapping ErrInvalidRequest, that Purge would
// return for r before reading or changing anything; nil when r is valid.
func (r PurgeRequest) Validate() error {
	_, _, err := r.check()
	return err
}

// check validates r and returns its statuses and batch size.
func (r PurgeRequest) check() (statuses []string, batch int, err error) {
	finished := []Status{StatusCompleted, StatusFailed, StatusCancelled}
	if statuses, err = (Filter{Statuses: r.Statuses}).statuses("purge", finished, finished); err != nil {
		return nil, 0, err
	}
	if r.FinishedBefore.IsZero() {
		return nil, 0, fmt.Errorf("%w: purge needs FinishedBefore", ErrInvalidRequest)
	}
	batch, err = batchSize(r.BatchSize, DefaultPurgeBatch)
	return statuses, batch, err
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

// SchemaInfo describes where skiplock lives in the database.
type SchemaInfo struct {
	// Name is the schema that holds skiplock_tasks, found through the
	// search_path.
	Name string
	// Version is the newest migration applied: skiplock_schema_version(),
	// whichever tool applied the migrations, or for a schema older than
	// migration 6 the version in skiplock_schema_migrations (0 when that
	// table is missing too: applied by another tool, version unknown).
	Version uint
	// Dirty is set when skiplock's own runner recorded a migration that
	// failed part way.
	Dirty bool
	// TableOID is skiplock_tasks' OID: the class of its task advisory locks.
	TableOID int64
}

// Schema finds skiplock's tables through the search_path and reads the
// schema's version. It returns ErrNotMigrated when they are missing, as a
// *NoSchemaError when no schema of the search_path exists.
func (c *Client) Schema(ctx context.Context) (SchemaInfo, error) {
	return ReadSchema(ctx, c.pool)
}

// ReadSchema is Client.Schema on any connection, pool or transaction.
func ReadSchema(ctx context.Context, conn Executor) (SchemaInfo, error) {
	queries := db.New()
	conn = pgerr.Interpreting(conn)
	table, err := queries.SchemaTaskTable(ctx, conn)
	if errors.Is(err, pgerr.ErrNotFound) {
		path, err := queries.SchemaSearchPath(ctx, conn)
		switch {
		case err != nil:
			return SchemaInfo{}, fmt.Errorf("finding skiplock's schema: %w", err)
		case !path.SchemaExists:
			return SchemaInfo{}, pgerr.NoSchema(path.SearchPath, path.UserName)
		}
		return SchemaInfo{}, fmt.Errorf("%w (table skiplock_tasks not found in search_path)", ErrNotMigrated)
	}
	if err != nil {
		return SchemaInfo{}, fmt.Errorf("finding skiplock's schema: %w", err)
	}
	info := SchemaInfo{Name: table.Schema, TableOID: table.Oid}
	src, err := queries.SchemaVersionSources(ctx, conn)
	if err != nil {
		return SchemaInfo{}, fmt.Errorf("reading the schema version: %w", err)
	}
	if src.HasTable {
		v, err := queries.SchemaVersion(ctx, conn)
		switch {
		case errors.Is(err, pgerr.ErrNotFound):
		case err != nil:
			return SchemaInfo{}, fmt.Errorf("reading the schema version: %w", err)
		default:
			info.Version, info.Dirty = uint(max(v.Version, 0)), v.Dirty
		}
	}
	if src.HasFunction {
		v, err := queries.SchemaVersionStamp(ctx, conn)
		if err != nil {
			return SchemaInfo{}, fmt.Errorf("reading the schema version: %w", err)
		}
		// A failed migration leaves the function as its predecessor set
		// it, so the function is the truth; the runner's table adds dirty.
		info.Version = uint(max(v, 0))
	}
	return info, nil
}

// CheckSchema returns nil when info is a schema this build can use, and
// otherwise an error wrapping ErrNotMigrated that names the missing
// migration.
func CheckSchema(info SchemaInfo) error {
	switch {
	case info.Dirty:
		return fmt.Errorf("%w (schema %s at version %d, dirty: a migration failed part way; fix it, then migrate up)",
			ErrNotMigrated, info.Name, info.Version)
	case info.Version == 0:
		return fmt.Errorf("%w (schema %s has skiplock_tasks but neither skiplock_schema_version() nor a version in "+
			"skiplock_schema_migrations: migrations before %06d were applied by another tool; apply %06d through %06d)",
			ErrNotMigrated, info.Name, stampVersion, stampVersion, migrations.Latest)
	case info.Version < migrations.Latest:
		return fmt.Errorf("%w (schema %s at version %d; this build needs %d: apply the migrations after %d)",
			ErrNotMigrated, info.Name, info.Version, migrations.Latest, info.Version)
	}
	return nil
}

// stampVersion is the migration that introduced skiplock_schema_version().
const stampVersion = 6

// Stats summarizes the tasks of every queue.
type Stats struct {
	// Queues has one entry per queue that has tasks or is paused, by name.
	Queues []QueueStats
	// Total adds up every queue; its Queue is empty and its OldestDue is
	// the oldest of all.
	Total QueueStats
}

// QueueStats summarizes one queue's tasks.
type QueueStats struct {
	Queue     string
	Pending   int64
	Running   int64
	Completed int64
	Failed    int64
	Cancelled int64
	// Due counts the pending tasks whose run time has come: the backlog.
	Due int64
	// Retrying and Scheduled count the pending tasks that wait for a later
	// run time: after a failed attempt, or as enqueued.
	Retrying  int64
	Scheduled int64
	// PausedAt is when the queue was paused; nil when it is not (and in
	// the total).
	PausedAt *time.Time
	// OldestDue is how long the oldest due pending task has waited past its
	// run time; zero when none is due.
	OldestDue time.Duration
	// Recent counts the tasks that finished over the last 1, 5 and 15
	// minutes, in that order. It counts the finished tasks still stored:
	// purging tasks that finished within the window lowers it.
	Recent []WindowStats
}

// WindowStats counts the tasks that finished within a window of time up to
// now.
type WindowStats struct {
	Window    time.Duration
	Completed int64
	// Failed counts tasks that failed for good (out of attempts, or failed
	// permanently), not attempts that will be retried.
	Failed int64
}

// PerMinute is the window's throughput: completed tasks per minute.
func (w WindowStats) PerMinute() float64 {
	if w.Window <= 0 {
		return 0
	}
	return float64(w.Completed) / w.Window.Minutes()
}

// FailureRate is the share of finished tasks that failed, 0 to 1; 0 when
// none finished.
func (w WindowStats) FailureRate() float64 {
	if w.Completed+w.Failed == 0 {
		return 0
	}
	return float64(w.Failed) / float64(w.Completed+w.Failed)
}

// StatsWindows are the windows of QueueStats.Recent.
var StatsWindows = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}

// Stats counts tasks per queue and status, measures the backlog and the
// recent throughput. It reads the whole table once.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	rows, err := c.queries.QueueStats(ctx, c.exec)
	if err != nil {
		return nil, fmt.Errorf("reading queue stats: %w", err)
	}
	s := &Stats{Queues: make([]QueueStats, 0, len(rows))}
	total := QueueStats{Recent: make([]WindowStats, len(StatsWindows))}
	for i, w := range StatsWindows {
		total.Recent[i].Window = w
	}
	for _, r := range rows {
		q := QueueStats{
			Queue: r.Queue, Pending: r.Pending, Running: r.Running, Completed: r.Completed,
			Failed: r.Failed, Cancelled: r.Cancelled, Due: r.Due, Retrying: r.Retrying, Scheduled: r.Scheduled,
			OldestDue: seconds(r.OldestDueSeconds), PausedAt: r.PausedAt,
			Recent: []WindowStats{
				{Window: StatsWindows[0], Completed: r.Completed1m, Failed: r.Failed1m},
				{Window: StatsWindows[1], Completed: r.Completed5m, Failed: r.Failed5m},
				{Window: StatsWindows[2], Completed: r.Completed15m, Failed: r.Failed15m},
			},
		}
		s.Queues = append(s.Queues, q)
		total.Pending += q.Pending
		total.Running += q.Running
		total.Completed += q.Completed
		total.Failed += q.Failed
		total.Cancelled += q.Cancelled
		total.Due += q.Due
		total.Retrying += q.Retrying
		total.Scheduled += q.Scheduled
		total.OldestDue = max(total.OldestDue, q.OldestDue)
		for i := range total.Recent {
			total.Recent[i].Completed += q.Recent[i].Completed
			total.Recent[i].Failed += q.Recent[i].Failed
		}
	}
	s.Total = total
	return s, nil
}

func seconds(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

// TaskLock is a task advisory lock that a session holds now.
type TaskLock struct {
	// TaskID is the running task the lock guards; 0 when no running task
	// has the lock's key (the task just finished and its lock is being
	// released, or the key belongs to a task of another skiplock table).
	TaskID  int64
	Queue   string
	Name    string
	Attempt int
	// Key is the lock's key: the low 32 bits of the task ID (pg_locks.objid).
	Key int64
	// HeldFor is how long the task has been running.
	HeldFor time.Duration
	// StartedAt is when the task's attempt started; zero when TaskID is 0.
	StartedAt time.Time
	// PID is the backend process of the session that holds the lock;
	// ClientAddr ("" for a Unix socket) and ApplicationName describe it.
	PID             int
	ClientAddr      string
	ApplicationName string
	// WorkerID, WorkerHost and WorkerPID identify the worker process that
	// registered the session; empty when none did.
	WorkerID   string
	WorkerHost string
	WorkerPID  int
	// TaskWorkerID is the worker the task row names as its runner.
	TaskWorkerID string
}

// Locks lists the task locks held now, oldest task first: which session,
// client and worker holds each running task.
func (c *Client) Locks(ctx context.Context) ([]TaskLock, error) {
	return c.locks(ctx, 0)
}

// LockHolder returns the lock of the task with the given ID, or nil when
// nobody holds it (the task is not running, or its worker's session is
// gone and the rescuer has yet to notice).
func (c *Client) LockHolder(ctx context.Context, id int64) (*TaskLock, error) {
	if id <= 0 {
		return nil, fmt.Errorf("%w: task ID %d is not positive", ErrInvalidRequest, id)
	}
	locks, err := c.locks(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, l := range locks {
		if l.TaskID == id {
			return &l, nil
		}
	}
	return nil, nil
}

func (c *Client) locks(ctx context.Context, taskID int64) ([]TaskLock, error) {
	info, err := c.Schema(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.queries.LockList(ctx, c.exec, db.LockListParams{LockClassOid: info.TableOID, TaskID: taskID})
	if err != nil {
		return nil, fmt.Errorf("listing task locks: %w", err)
	}
	out := make([]TaskLock, 0, len(rows))
	for _, r := range rows {
		l := TaskLock{
			Key: r.Key, PID: int(r.Pid), ClientAddr: r.ClientAddr, ApplicationName: r.ApplicationName,
			HeldFor: seconds(r.HeldSeconds),
		}
		if r.TaskID != nil {
			l.TaskID = *r.TaskID
			l.Queue = deref(r.Queue)
			l.Name = deref(r.Name)
			l.Attempt = int(deref(r.Attempt))
			l.TaskWorkerID = deref(r.TaskWorkerID)
			l.StartedAt = deref(r.StartedAt)
		}
		l.WorkerID = deref(r.WorkerID)
		l.WorkerHost = deref(r.WorkerHost)
		l.WorkerPID = int(deref(r.WorkerPid))
		out = append(out, l)
	}
	return out, nil
}

// LockWait is a session of the database waiting for a lock that other
// sessions hold.
type LockWait struct {
	PID             int
	ClientAddr      string
	ApplicationName string
	// WaitEvent is what it waits for: transactionid, tuple, relation,
	// advisory...
	WaitEvent string
	// BlockedBy are the PIDs of the sessions it waits for.
	BlockedBy []int
	// Waiting is how long it has been in its current state.
	Waiting time.Duration
	// Query is the start of the statement that waits.
	Query string
}

// LockWaits lists the sessions of the database that wait for a lock, with
// the sessions blocking them, longest wait first.
func (c *Client) LockWaits(ctx context.Context) ([]LockWait, error) {
	rows, err := c.queries.LockWaitList(ctx, c.exec)
	if err != nil {
		return nil, fmt.Errorf("listing lock waits: %w", err)
	}
	out := make([]LockWait, 0, len(rows))
	for _, r := range rows {
		w := LockWait{
			PID: int(r.Pid), ClientAddr: r.ClientAddr, ApplicationName: r.ApplicationName,
			WaitEvent: r.WaitEvent, Waiting: seconds(r.WaitingSeconds), Query: r.Query,
			BlockedBy: make([]int, len(r.BlockedBy)),
		}
		for i, p := range r.BlockedBy {
			w.BlockedBy[i] = int(p)
		}
		out = append(out, w)
	}
	return out, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
