package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// ErrBatchNotFound is returned for a batch ID that does not exist (or no
// longer does: see GetBatch).
var ErrBatchNotFound = errors.New("skiplock: batch not found")

// ErrNotInBatch is returned by worker.BatchInfo for a task that belongs to
// no batch.
var ErrNotInBatch = errors.New("skiplock: task is not in a batch")

// Batch is a group of tasks enqueued together, its members, with up to two
// callback tasks: OnFinish runs once every member has finished, whatever
// the outcomes, and OnSuccess runs only if every member completed. A
// member has finished when it completed, failed for good (its attempts
// ran out, or it failed permanently) or was cancelled; a member that
// failed an attempt and will retry has not. A callback's handler reads the
// batch's counts with worker.BatchInfo.
//
// Unlike a workflow's dependents, the OnFinish callback runs however the
// members end. When some member did not complete, the OnSuccess callback
// is cancelled, with the counts in its history; if the members that did
// not complete are requeued later and all complete, it runs then.
//
// The callbacks run at most once each. A member requeued after the batch
// finished lowers its counts (and its completion raises them again); the
// OnFinish callback does not run again. A member deleted before it
// finished counts as cancelled; one deleted after it finished keeps its
// count, so that retention does not change a batch's counts.
type Batch struct {
	// Name is shown by `skiplock batch` and the dashboard. Optional.
	Name string
	// Tasks are the members: at least one. Add and AddArgs append to it.
	Tasks []NewTask
	// OnFinish is the task to run once every member has finished; the
	// zero NewTask (no Name) for none.
	OnFinish NewTask
	// OnSuccess is the task to run once every member has completed; the
	// zero NewTask for none.
	OnSuccess NewTask
	// Options apply to every task of the batch, members and callbacks,
	// before the task's own Options, so that a task's option wins. A
	// callback's WithDelay or WithRunAt counts from the enqueue: the
	// callback runs when the batch finishes or at that time, whichever is
	// later.
	//
	// Options that name one task, or that make a task wait for something
	// other than its batch, are refused, here and in a task's Options,
	// with an error wrapping ErrInvalidTask that names them: WithUniqueKey,
	// WithUnique and WithUniqueWindow (a duplicate would not be inserted,
	// and the batch would wait for it forever), WithSequence and
	// WithSequenceHold, and WithDependsOn.
	Options []Option
}

// Add appends a member and returns b, so that calls chain.
func (b *Batch) Add(name string, payload any, opts ...Option) *Batch {
	b.Tasks = append(b.Tasks, NewTask{Name: name, Payload: payload, Options: opts})
	return b
}

// AddArgs appends a typed member, NewTaskFrom(args, opts...), and returns
// b.
func (b *Batch) AddArgs(args TaskArgs, opts ...Option) *Batch {
	b.Tasks = append(b.Tasks, NewTaskFrom(args, opts...))
	return b
}

// EnqueuedBatch is what EnqueueBatch inserted.
type EnqueuedBatch struct {
	ID int64
	// TaskIDs are the members' task IDs, in the order of Batch.Tasks.
	TaskIDs []int64
	// OnFinishTaskID and OnSuccessTaskID are the callbacks' task IDs, as
	// BatchInfo has them; 0 for none.
	OnFinishTaskID, OnSuccessTaskID int64
}

// BatchInfo is a batch and the counts of its members by outcome, as
// GetBatch, ListBatches and worker.BatchInfo return it.
type BatchInfo struct {
	ID   int64
	Name string
	// Total is the number of members; Completed, Failed (for good) and
	// Cancelled count those that have finished so. The others are still
	// pending, running, or failed an attempt and will retry.
	Total, Completed, Failed, Cancelled int
	// OnFinishTaskID and OnSuccessTaskID are the callbacks' task IDs; 0
	// for none.
	OnFinishTaskID, OnSuccessTaskID int64
	CreatedAt                       time.Time
	// FinishedAt is when every member had first finished, and the
	// callbacks were released; nil until then. It stays set if a member
	// is requeued afterwards.
	FinishedAt *time.Time
}

// Finished reports whether every member has finished now.
func (b *BatchInfo) Finished() bool { return b.Completed+b.Failed+b.Cancelled == b.Total }

// Succeeded reports whether every member has completed.
func (b *BatchInfo) Succeeded() bool { return b.Completed == b.Total }

// Unfinished is the number of members that have not finished.
func (b *BatchInfo) Unfinished() int { return b.Total - b.Completed - b.Failed - b.Cancelled }

// EnqueueBatch inserts a batch's members and callbacks in one transaction.
// An invalid batch (no members, a callback or member that is not a valid
// task, an option that does not apply to a batch) is an error wrapping
// ErrInvalidTask that names what is wrong, and inserts nothing.
//
// A callback's name is not checked against the workers' handlers (a
// producer does not know them): a callback whose name no worker handles
// waits, pending, like any task without a handler, until a worker that
// handles it runs (`skiplock stats` and the dashboard list such tasks).
func (c *Client) EnqueueBatch(ctx context.Context, b Batch) (EnqueuedBatch, error) {
	var out EnqueuedBatch
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		out, err = c.EnqueueBatchTx(ctx, tx, b)
		return err
	})
	return out, c.explain(ctx, pgerr.Interpret(err))
}

// EnqueueBatchTx is EnqueueBatch within tx: the batch exists if and only if
// tx commits, and no member runs before then.
func (c *Client) EnqueueBatchTx(ctx context.Context, tx Executor, b Batch) (EnqueuedBatch, error) {
	rows, err := prepareBatch(b, c.limits, c.keyring)
	if err != nil {
		return EnqueuedBatch{}, err
	}
	a, err := c.enqueueAudit(ctx, pgerr.Interpreting(tx))
	if err != nil {
		return EnqueuedBatch{}, err
	}
	hooked, err := c.beforeEnqueue(ctx, rows)
	if err != nil {
		return EnqueuedBatch{}, err
	}
	x := pgerr.Interpreting(tx)
	var now time.Time
	var ids []int64
	if err := x.QueryRow(ctx, reserveIDs, len(rows)).Scan(&now, &ids); err != nil {
		return EnqueuedBatch{}, fmt.Errorf("enqueueing batch: reserving task ids: %w", err)
	}
	members := len(b.Tasks)
	out := EnqueuedBatch{TaskIDs: ids[:members:members]}
	p := db.BatchCreateParams{Name: b.Name, Total: int32(members)}
	next := members
	if b.OnFinish.Name != "" {
		out.OnFinishTaskID = ids[next]
		p.OnFinishTaskID = &out.OnFinishTaskID
		next++
	}
	if b.OnSuccess.Name != "" {
		out.OnSuccessTaskID = ids[next]
		p.OnSuccessTaskID = &out.OnSuccessTaskID
	}
	created, err := c.queries.BatchCreate(ctx, x, p)
	if err != nil {
		return EnqueuedBatch{}, fmt.Errorf("enqueueing batch: %w", err)
	}
	out.ID = created.ID

	n := len(rows)
	ip := db.TaskInsertBatchParams{
		BatchID: out.ID, Ids: ids,
		Queues: make([]string, n), Names: make([]string, n), Payloads: make([]json.RawMessage, n),
		Metadatas: make([]json.RawMessage, n), Priorities: make([]int16, n), RunAts: make([]time.Time, n),
		DelayMs: make([]int64, n), MaxAttempts: make([]int32, n), TimeoutMs: make([]int64, n),
		ExclusiveKeys: make([]string, n), LimitKeys: make([]string, n), Statuses: make([]string, n),
	}
	for i, r := range rows {
		ip.Queues[i], ip.Names[i], ip.Payloads[i], ip.Metadatas[i] = r.queue, r.name, r.payload, r.metadata
		ip.Priorities[i], ip.RunAts[i], ip.DelayMs[i] = r.priority, r.runAt, r.delayMs
		ip.MaxAttempts[i], ip.TimeoutMs[i], ip.ExclusiveKeys[i] = r.maxAttempts, r.timeoutMs, r.exclusiveKey
		ip.LimitKeys[i] = r.limitKey
		ip.Statuses[i] = string(StatusPending)
		if i >= members {
			ip.Statuses[i] = string(StatusWaiting)
		}
	}
	if err := c.queries.TaskInsertBatch(ctx, x, ip); err != nil {
		return EnqueuedBatch{}, fmt.Errorf("enqueueing batch: %w", err)
	}
	if a != nil {
		req := enqueueRequestMap(rows, ids)
		req["batch"] = out.ID
		a.request, _ = json.Marshal(req)
		if err := a.insert(ctx, x, int64(len(ids))); err != nil {
			return EnqueuedBatch{}, err
		}
	}
	c.afterEnqueue(ctx, hooked, ids)
	return out, nil
}

// prepareBatch validates a batch and returns its rows: the members in
// order, then OnFinish, then OnSuccess, each if set.
func prepareBatch(b Batch, limits inputLimits, kr *Keyring) ([]row, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: batch %q: %s", ErrInvalidTask, b.Name, fmt.Sprintf(format, args...))
	}
	if len(b.Tasks) == 0 {
		what := "no tasks"
		if b.OnFinish.Name != "" || b.OnSuccess.Name != "" {
			what = "no tasks, so its callbacks would never run"
		}
		return nil, invalid("%s (Batch.Tasks needs at least one member)", what)
	}
	if err := checkBatchOptions(b.Options); err != nil {
		return nil, fmt.Errorf("batch %q: Batch.Options: %w", b.Name, err)
	}
	one := func(what string, t NewTask) (row, error) {
		opts := append(append(make([]Option, 0, len(b.Options)+len(t.Options)), b.Options...), t.Options...)
		if err := checkBatchOptions(t.Options); err != nil {
			return row{}, fmt.Errorf("batch %q: %s (%q): %w", b.Name, what, t.Name, err)
		}
		r, err := prepare(NewTask{Name: t.Name, Payload: t.Payload, Options: opts}, limits, kr)
		if err != nil {
			return row{}, fmt.Errorf("batch %q: %s: %w", b.Name, what, err)
		}
		return r, nil
	}
	rows := make([]row, 0, len(b.Tasks)+2)
	for i, t := range b.Tasks {
		r, err := one(fmt.Sprintf("task %d", i), t)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	for _, cb := range []struct {
		field string
		task  NewTask
	}{{"OnFinish", b.OnFinish}, {"OnSuccess", b.OnSuccess}} {
		if cb.task.Name == "" {
			if cb.task.Payload != nil || len(cb.task.Options) > 0 {
				return nil, invalid("Batch.%s has a payload or options but no Name", cb.field)
			}
			continue
		}
		r, err := one("Batch."+cb.field, cb.task)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// checkBatchOptions refuses the options that do not apply to a task of a
// batch.
func checkBatchOptions(opts []Option) error {
	return refusals{
		scope:    "a task of a batch",
		unique:   "a duplicate would not be inserted, and the batch would wait for it",
		sequence: "a task of a batch waits for nothing but its batch",
		depends:  "a task of a batch waits for nothing but its batch",
		replace:  "a task of a batch is counted by its batch, and a replaced task would be counted twice",
	}.check(opts)
}

// GetBatch returns a batch with its counts, or ErrBatchNotFound. A batch
// is deleted by the workers' retention once none of its tasks is left.
func (c *Client) GetBatch(ctx context.Context, id int64) (*BatchInfo, error) {
	r, err := c.queries.BatchGet(ctx, c.exec, id)
	if errors.Is(err, pgerr.ErrNotFound) {
		return nil, fmt.Errorf("%w: %d", ErrBatchNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("getting batch %d: %w", id, err)
	}
	return batchFromRow(r), nil
}

// BatchFilter selects batches for ListBatches.
type BatchFilter struct {
	// State is "running" (some member has not finished yet), "finished"
	// or "" for both.
	State string
	// BeforeID lists batches with a smaller ID only, to page back; 0 for
	// the newest.
	BeforeID int64
	// Limit is the most batches to return. Defaults to 50.
	Limit int
}

// ListBatches returns batches newest first. An unknown State is an error
// that names it.
func (c *Client) ListBatches(ctx context.Context, f BatchFilter) ([]*BatchInfo, error) {
	switch f.State {
	case "", "running", "finished":
	default:
		return nil, fmt.Errorf("%w: unknown batch state %q: want running, finished or none", ErrInvalidRequest, f.State)
	}
	if f.Limit <= 0 {
		f.Limit = 50
	}
	rows, err := c.queries.BatchList(ctx, c.exec, db.BatchListParams{BeforeID: f.BeforeID, State: f.State, MaxRows: int32(min(f.Limit, 1<<30))})
	if err != nil {
		return nil, fmt.Errorf("listing batches: %w", err)
	}
	out := make([]*BatchInfo, len(rows))
	for i, r := range rows {
		out[i] = batchFromRow(r)
	}
	return out, nil
}

// BatchTasks returns a batch's tasks still stored, members and callbacks,
// in ID order (tell the callbacks by BatchInfo.OnFinishTaskID and
// OnSuccessTaskID). Tasks past their retention are gone from it; the
// batch's counts still count them.
func (c *Client) BatchTasks(ctx context.Context, id int64) ([]*Task, error) {
	rows, err := c.queries.BatchTasks(ctx, c.exec, id)
	if err != nil {
		return nil, fmt.Errorf("getting the tasks of batch %d: %w", id, err)
	}
	out := make([]*Task, 0, len(rows))
	for _, r := range rows {
		t, err := taskFromRow(r)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// batchFromRow converts a stored batch.
func batchFromRow(r db.SkiplockBatch) *BatchInfo {
	b := &BatchInfo{
		ID: r.ID, Name: r.Name, Total: int(r.Total), Completed: int(r.Completed), Failed: int(r.Failed),
		Cancelled: int(r.Cancelled), CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt,
	}
	if r.OnFinishTaskID != nil {
		b.OnFinishTaskID = *r.OnFinishTaskID
	}
	if r.OnSuccessTaskID != nil {
		b.OnSuccessTaskID = *r.OnSuccessTaskID
	}
	return b
}

// BatchOfTask returns the batch of the task id, member or callback:
// ErrNotInBatch for a task outside batches, ErrNotFound for no such task.
// worker.BatchInfo calls it for the running task.
func (c *Client) BatchOfTask(ctx context.Context, id int64) (*BatchInfo, error) {
	r, err := c.queries.BatchOfTask(ctx, c.exec, id)
	if errors.Is(err, pgerr.ErrNotFound) {
		if _, err := c.queries.TaskGet(ctx, c.exec, id); errors.Is(err, pgerr.ErrNotFound) {
			return nil, fmt.Errorf("%w: task %d", ErrNotFound, id)
		}
		return nil, fmt.Errorf("%w: task %d", ErrNotInBatch, id)
	}
	if err != nil {
		return nil, fmt.Errorf("getting the batch of task %d: %w", id, err)
	}
	return batchFromRow(r), nil
}
