package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// DependencyFailure is what a task does when a task it depends on fails for
// good or is cancelled.
type DependencyFailure string

const (
	// DependencyFailureCancel cancels the waiting task, with the reason in
	// its history, and so the tasks that depend on it in turn. Requeueing
	// the failed dependency puts them back to waiting. The default.
	DependencyFailureCancel DependencyFailure = "cancel"
	// DependencyFailureWait leaves the task waiting, until the dependency
	// is requeued and completes, or the task is cancelled.
	DependencyFailureWait DependencyFailure = "wait"
)

// ErrWorkflowNotFound is returned for a workflow ID that does not exist.
var ErrWorkflowNotFound = errors.New("skiplock: workflow not found")

// WithDependsOn makes the task wait until every one of the tasks ids has
// completed: it is enqueued with StatusWaiting and becomes pending, due at
// once (or at its own later run time), in the transaction that completes
// the last of them, on whichever worker. The ids may be tasks enqueued
// earlier in the same transaction, or long ago; a dependency that has
// already completed counts as done. If one of them failed for good or was
// cancelled, the task is cancelled at once (see WithDependencyFailure).
//
// The task joins its dependencies' workflow, or starts one, so that
// `skiplock workflow show` can draw it. Enqueueing it locks the rows of its
// dependencies until the transaction ends: a dependency that finishes
// meanwhile waits to record its outcome, so keep such transactions short.
// Unknown ids are an error (ErrInvalidTask); nothing is inserted. A task
// with dependencies may have a unique key only with WithUniqueWindow (the
// unique index covers pending and running tasks, not waiting ones).
func WithDependsOn(ids ...int64) Option {
	return func(o *options) { o.dependsOn = append(o.dependsOn, ids...) }
}

// WithDependencyFailure sets what the task does when a task it depends on
// fails for good or is cancelled. Defaults to DependencyFailureCancel.
func WithDependencyFailure(p DependencyFailure) Option {
	return func(o *options) { o.depFailure = p }
}

// Workflow is a group of tasks with dependencies between them, a directed
// acyclic graph, enqueued together with Client.EnqueueWorkflow: steps
// without dependencies are due at once, and each other step waits until
// the steps it depends on have completed. Fan-out is several steps
// depending on one; fan-in is one depending on several. A step's handler
// reads the outputs of the steps it depends on with
// worker.DependencyOutputs.
type Workflow struct {
	// Name is shown by `skiplock workflow show` and the dashboard.
	// Optional.
	Name string
	// Steps, each with a name unique within the workflow.
	Steps []Step
	// DependencyFailure applies to every step that does not set its own
	// with WithDependencyFailure. Defaults to DependencyFailureCancel.
	DependencyFailure DependencyFailure
	// Options apply to every step, before the step's own Options, so that
	// a step's option wins: WithQueue("media") here puts every step in
	// "media" but the ones that say otherwise. They come after
	// DependencyFailure, so a WithDependencyFailure here overrides it.
	//
	// Any option that applies to a step applies here, with the same
	// meaning for each step: WithDelay and WithRunAt make every step due
	// no earlier than that time, counted from the enqueue, not from the
	// completion of its dependencies; WithExclusiveKey gives every step
	// the key, so parallel steps run one at a time; WithLimitKey counts
	// every step against the limits that match it; a step's WithMetadata
	// replaces the workflow's object, it does not merge with it.
	//
	// The options that name one task are refused with an error wrapping
	// ErrInvalidTask that names them: WithUniqueKey, WithUnique and
	// WithUniqueWindow (every step but one would be a duplicate),
	// WithSequence and WithSequenceHold, and WithDependsOn (use
	// Step.DependsOn). Options are validated on their own, so an invalid
	// one is refused even if every step overrides it.
	Options []Option
}

// Step is one task of a Workflow.
type Step struct {
	// Name names the step within its workflow: 1 to 255 bytes, unique.
	Name string
	// Task is the task's name, the handler that runs it. Defaults to
	// Name.
	Task    string
	Payload any
	// DependsOn names the steps that must complete before this one runs.
	DependsOn []string
	// Options of the task, applied after the workflow's Options, so they
	// win. Unique keys, sequence keys and WithDependsOn do not apply to a
	// step (use DependsOn).
	//
	// Payload is encoded as it is, even a TaskArgs value: a step does not
	// consult its TaskName or TaskOptions (TaskDefaults). Set Task, and
	// pass the type's TaskOptions() first in Options if the step should
	// have them; they then override the workflow's Options, as any step
	// option does.
	Options []Option
}

// EnqueuedWorkflow is what EnqueueWorkflow inserted.
type EnqueuedWorkflow struct {
	ID int64
	// TaskIDs maps each step's name to its task's ID.
	TaskIDs map[string]int64
}

// EnqueueWorkflow inserts a workflow's tasks in one transaction. An
// invalid workflow (a step without a name, two with one name, a
// dependency on an unknown step, a cycle) is an error wrapping
// ErrInvalidTask, and inserts nothing.
func (c *Client) EnqueueWorkflow(ctx context.Context, wf Workflow) (EnqueuedWorkflow, error) {
	var out EnqueuedWorkflow
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		out, err = c.EnqueueWorkflowTx(ctx, tx, wf)
		return err
	})
	return out, c.explain(ctx, pgerr.Interpret(err))
}

// EnqueueWorkflowTx is EnqueueWorkflow within tx: the workflow exists if and
// only if tx commits.
func (c *Client) EnqueueWorkflowTx(ctx context.Context, tx Executor, wf Workflow) (EnqueuedWorkflow, error) {
	rows, order, err := prepareWorkflow(wf, c.limits, c.keyring)
	if err != nil {
		return EnqueuedWorkflow{}, err
	}
	a, err := c.enqueueAudit(ctx, pgerr.Interpreting(tx))
	if err != nil {
		return EnqueuedWorkflow{}, err
	}
	hooked, err := c.beforeEnqueue(ctx, rows)
	if err != nil {
		return EnqueuedWorkflow{}, err
	}
	x := pgerr.Interpreting(tx)
	var now time.Time
	var ids []int64
	if err := x.QueryRow(ctx, reserveIDs, len(rows)).Scan(&now, &ids); err != nil {
		return EnqueuedWorkflow{}, fmt.Errorf("enqueueing workflow: reserving task ids: %w", err)
	}
	out := EnqueuedWorkflow{TaskIDs: make(map[string]int64, len(rows))}
	for i, s := range wf.Steps {
		out.TaskIDs[s.Name] = ids[i]
	}
	steps, _ := json.Marshal(out.TaskIDs)
	if out.ID, err = c.queries.WorkflowCreate(ctx, x, db.WorkflowCreateParams{Name: wf.Name, Steps: steps}); err != nil {
		return EnqueuedWorkflow{}, fmt.Errorf("enqueueing workflow: %w", err)
	}

	n := len(rows)
	p := db.TaskInsertWorkflowParams{
		WorkflowID: out.ID, Ids: ids,
		Queues: make([]string, n), Names: make([]string, n), Payloads: make([]json.RawMessage, n),
		Metadatas: make([]json.RawMessage, n), Priorities: make([]int16, n), RunAts: make([]time.Time, n),
		DelayMs: make([]int64, n), MaxAttempts: make([]int32, n), TimeoutMs: make([]int64, n),
		ExclusiveKeys: make([]string, n), LimitKeys: make([]string, n), DependsOn: make([]string, n), Dependents: make([]string, n),
		DependencyFailures: make([]string, n),
	}
	dependents := make([][]int64, n)
	for i := range rows {
		for _, d := range order[i] {
			dependents[d] = append(dependents[d], ids[i])
		}
	}
	for i, r := range rows {
		p.Queues[i], p.Names[i], p.Payloads[i], p.Metadatas[i] = r.queue, r.name, r.payload, r.metadata
		p.Priorities[i], p.RunAts[i], p.DelayMs[i] = r.priority, r.runAt, r.delayMs
		p.MaxAttempts[i], p.TimeoutMs[i], p.ExclusiveKeys[i] = r.maxAttempts, r.timeoutMs, r.exclusiveKey
		p.LimitKeys[i] = r.limitKey
		deps := make([]int64, len(order[i]))
		for j, d := range order[i] {
			deps[j] = ids[d]
		}
		p.DependsOn[i], p.Dependents[i] = arrayLiteral(deps), arrayLiteral(dependents[i])
		p.DependencyFailures[i] = string(r.depFailure)
	}
	if err := c.queries.TaskInsertWorkflow(ctx, x, p); err != nil {
		return EnqueuedWorkflow{}, fmt.Errorf("enqueueing workflow: %w", err)
	}
	if a != nil {
		req := enqueueRequestMap(rows, ids)
		req["workflow"] = out.ID
		a.request, _ = json.Marshal(req)
		if err := a.insert(ctx, x, int64(len(ids))); err != nil {
			return EnqueuedWorkflow{}, err
		}
	}
	c.afterEnqueue(ctx, hooked, ids)
	return out, nil
}

// prepareWorkflow validates a workflow and returns its steps' rows and, for
// each step, the positions of the steps it depends on.
func prepareWorkflow(wf Workflow, limits inputLimits, kr *Keyring) ([]row, [][]int, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: workflow %q: %s", ErrInvalidTask, wf.Name, fmt.Sprintf(format, args...))
	}
	if len(wf.Steps) == 0 {
		return nil, nil, invalid("no steps")
	}
	if err := checkWorkflowOptions(wf.Options); err != nil {
		return nil, nil, fmt.Errorf("workflow %q: Workflow.Options: %w", wf.Name, err)
	}
	pos := make(map[string]int, len(wf.Steps))
	for i, s := range wf.Steps {
		if err := checkLength("step name", s.Name, true, MaxNameLength, "queue.MaxNameLength"); err != nil {
			return nil, nil, fmt.Errorf("workflow %q: step %d: %w", wf.Name, i, err)
		}
		if _, dup := pos[s.Name]; dup {
			return nil, nil, invalid("two steps are named %q", s.Name)
		}
		pos[s.Name] = i
	}
	rows := make([]row, len(wf.Steps))
	deps := make([][]int, len(wf.Steps))
	for i, s := range wf.Steps {
		task := s.Task
		if task == "" {
			task = s.Name
		}
		// The workflow's options first, so that the step's win.
		opts := make([]Option, 0, 1+len(wf.Options)+len(s.Options))
		if wf.DependencyFailure != "" {
			opts = append(opts, WithDependencyFailure(wf.DependencyFailure))
		}
		opts = append(append(opts, wf.Options...), s.Options...)
		r, err := prepare(NewTask{Name: task, Payload: s.Payload, Options: opts}, limits, kr)
		if err != nil {
			return nil, nil, fmt.Errorf("workflow %q: step %q: %w", wf.Name, s.Name, err)
		}
		if r.uniqueKey != "" || r.uniqueWindowKey != "" || len(r.dependsOn) > 0 {
			return nil, nil, invalid("step %q: unique keys and WithDependsOn do not apply to a step (use Step.DependsOn)", s.Name)
		}
		if r.replaceKey != "" {
			return nil, nil, invalid("step %q: WithReplaceKey and WithDebounce do not apply to a step (a step is one task of its workflow)", s.Name)
		}
		if r.sequenceKey != "" {
			return nil, nil, invalid("step %q: WithSequence does not apply to a step (a step waits for its dependencies)", s.Name)
		}
		for _, d := range s.DependsOn {
			j, ok := pos[d]
			if !ok {
				return nil, nil, invalid("step %q depends on %q, which is not a step", s.Name, d)
			}
			if !slices.Contains(deps[i], j) {
				deps[i] = append(deps[i], j)
			}
		}
		rows[i] = r
	}
	// Kahn's algorithm: every step must be reachable in dependency order.
	left := make([]int, len(rows))
	next := make([][]int, len(rows))
	for i, ds := range deps {
		left[i] = len(ds)
		for _, d := range ds {
			next[d] = append(next[d], i)
		}
	}
	var ready []int
	for i, n := range left {
		if n == 0 {
			ready = append(ready, i)
		}
	}
	done := 0
	for len(ready) > 0 {
		i := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		done++
		for _, j := range next[i] {
			if left[j]--; left[j] == 0 {
				ready = append(ready, j)
			}
		}
	}
	if done < len(rows) {
		var cyclic []string
		for i, n := range left {
			if n > 0 {
				cyclic = append(cyclic, wf.Steps[i].Name)
			}
		}
		return nil, nil, invalid("dependencies form a cycle among steps %s", strings.Join(cyclic, ", "))
	}
	return rows, deps, nil
}

// checkWorkflowOptions refuses Workflow.Options that name one task, and
// validates the others on their own.
func checkWorkflowOptions(opts []Option) error {
	return refusals{
		scope:     "a whole workflow",
		uniqueKey: "every step but one would be a duplicate",
		unique:    "a workflow's steps take no unique key",
		sequence:  "a step waits for its dependencies, not for a sequence",
		depends:   "use Step.DependsOn",
		replace:   "a step is one task of its workflow",
	}.check(opts)
}

// arrayLiteral is ids as a PostgreSQL array literal; "" for none.
func arrayLiteral(ids []int64) string {
	if len(ids) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteByte('}')
	return b.String()
}

func withDependencies(rows []row) bool {
	for i := range rows {
		if len(rows[i].dependsOn) > 0 {
			return true
		}
	}
	return false
}

// insertEach inserts rows one by one, in order: a task with dependencies
// through insertDependent, one with a replace key through insertReplacing,
// the others as usual.
func (c *Client) insertEach(ctx context.Context, tx Executor, rows []row) ([]int64, []*DuplicateError, error) {
	ids := make([]int64, len(rows))
	var dups []*DuplicateError
	for i := range rows {
		var dup *DuplicateError
		if rows[i].replaceKey != "" {
			id, err := c.insertReplacing(ctx, tx, rows[i])
			if err != nil {
				return nil, nil, err
			}
			ids[i] = id
		} else if len(rows[i].dependsOn) > 0 {
			id, err := c.insertDependent(ctx, tx, rows[i])
			if err != nil {
				return nil, nil, err
			}
			if id == 0 {
				dup = &DuplicateError{Key: rows[i].uniqueKey + rows[i].uniqueWindowKey}
				p := db.TaskInsertManyParams{UniqueKeys: []string{rows[i].uniqueKey}, UniqueWindowKeys: []string{rows[i].uniqueWindowKey}}
				if err := c.fillDuplicates(ctx, tx, p, []*DuplicateError{dup}); err != nil {
					return nil, nil, err
				}
			}
			ids[i] = id
		} else {
			one, oneDups, err := c.insertRows(ctx, tx, rows[i:i+1], nil)
			if err != nil {
				return nil, nil, err
			}
			ids[i] = one[0]
			if len(oneDups) > 0 {
				dup = oneDups[0]
			}
		}
		if dup != nil {
			dup.Index = i
			dups = append(dups, dup)
		}
	}
	return ids, dups, nil
}

// insertDependent inserts one task with dependencies; 0 when its unique
// key is taken.
func (c *Client) insertDependent(ctx context.Context, tx Executor, r row) (int64, error) {
	x := pgerr.Interpreting(tx)
	want := slices.Clone(r.dependsOn)
	slices.Sort(want)
	want = slices.Compact(want)
	deps, err := c.queries.TaskDependenciesLock(ctx, x, want)
	if err != nil {
		return 0, fmt.Errorf("enqueueing: locking dependencies: %w", err)
	}
	if len(deps) < len(want) {
		found := make(map[int64]bool, len(deps))
		for _, d := range deps {
			found[d.ID] = true
		}
		var missing []string
		for _, id := range want {
			if !found[id] {
				missing = append(missing, strconv.FormatInt(id, 10))
			}
		}
		return 0, fmt.Errorf("%w: task %q depends on tasks that do not exist: %s", ErrInvalidTask, r.name, strings.Join(missing, ", "))
	}

	status, pending, errs := StatusWaiting, 0, json.RawMessage("[]")
	var workflowID int64
	for _, d := range deps {
		if d.WorkflowID != nil && (workflowID == 0 || *d.WorkflowID < workflowID) {
			workflowID = *d.WorkflowID
		}
		switch Status(d.Status) {
		case StatusCompleted:
			continue
		case StatusFailed, StatusCancelled:
			if r.depFailure != DependencyFailureWait && status != StatusCancelled {
				status = StatusCancelled
				how := "failed for good"
				if Status(d.Status) == StatusCancelled {
					how = "was cancelled"
				}
				errs, _ = json.Marshal([]map[string]any{{
					"attempt": 0, "outcome": "dependency_" + d.Status,
					"error":       fmt.Sprintf("dependency %d (%s) %s", d.ID, d.Name, how),
					"finished_at": time.Now(),
				}})
			}
		}
		pending++
	}
	if pending == 0 {
		status = StatusPending
	}
	if workflowID == 0 {
		if workflowID, err = c.queries.WorkflowCreate(ctx, x, db.WorkflowCreateParams{Steps: json.RawMessage("{}")}); err != nil {
			return 0, fmt.Errorf("enqueueing: %w", err)
		}
	}
	inserted, err := c.queries.TaskInsertDependent(ctx, x, db.TaskInsertDependentParams{
		Queue: r.queue, Name: r.name, Payload: r.payload, Metadata: r.metadata, Priority: r.priority,
		RunAt: r.runAt, DelayMs: r.delayMs, MaxAttempts: r.maxAttempts, TimeoutMs: r.timeoutMs,
		UniqueKey: r.uniqueKey, UniqueWindowKey: r.uniqueWindowKey, ExclusiveKey: r.exclusiveKey, LimitKey: r.limitKey,
		Status: string(status), Errors: errs, WorkflowID: workflowID, DependsOn: want, DepsPending: int32(pending),
		DependencyFailure: string(r.depFailure),
	})
	if err != nil {
		return 0, fmt.Errorf("enqueueing: %w", err)
	}
	if len(inserted) == 0 {
		return 0, nil
	}
	id := inserted[0]
	if err := c.queries.TaskAddDependent(ctx, x, db.TaskAddDependentParams{DependentID: id, WorkflowID: workflowID, Ids: want}); err != nil {
		return 0, fmt.Errorf("enqueueing: recording the dependent: %w", err)
	}
	return id, nil
}

// WorkflowInfo is a workflow as stored: its tasks with their dependencies
// and states.
type WorkflowInfo struct {
	ID        int64
	Name      string
	CreatedAt time.Time
	// Tasks in the order they were enqueued.
	Tasks []*Task
	// Steps maps each task's ID to its step name, for workflows enqueued
	// with EnqueueWorkflow.
	Steps map[int64]string
}

// GetWorkflow returns a workflow and its tasks, or ErrWorkflowNotFound.
// Tasks past their retention (worker.Config.RetainCompleted and the like)
// are gone from it.
func (c *Client) GetWorkflow(ctx context.Context, id int64) (*WorkflowInfo, error) {
	w, err := c.queries.WorkflowGet(ctx, c.exec, id)
	if errors.Is(err, pgerr.ErrNotFound) {
		return nil, fmt.Errorf("%w: %d", ErrWorkflowNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("getting workflow %d: %w", id, err)
	}
	rows, err := c.queries.WorkflowTasks(ctx, c.exec, id)
	if err != nil {
		return nil, fmt.Errorf("getting workflow %d: %w", id, err)
	}
	out := &WorkflowInfo{ID: w.ID, Name: w.Name, CreatedAt: w.CreatedAt, Steps: map[int64]string{}}
	var steps map[string]int64
	if err := json.Unmarshal(w.Steps, &steps); err != nil {
		return nil, fmt.Errorf("decoding steps of workflow %d: %w", id, err)
	}
	for name, tid := range steps {
		out.Steps[tid] = name
	}
	for _, r := range rows {
		t, err := taskFromRow(r)
		if err != nil {
			return nil, err
		}
		out.Tasks = append(out.Tasks, t)
	}
	return out, nil
}

// Levels lays the workflow's tasks out as a DAG: level 0 holds the tasks
// that depend on nothing in the workflow, and every other task sits one
// level after the deepest task it depends on. Within a level, tasks keep
// their enqueue order.
func (w *WorkflowInfo) Levels() [][]*Task {
	byID := make(map[int64]*Task, len(w.Tasks))
	for _, t := range w.Tasks {
		byID[t.ID] = t
	}
	level := make(map[int64]int, len(w.Tasks))
	var depth func(t *Task, hops int) int
	depth = func(t *Task, hops int) int {
		if l, ok := level[t.ID]; ok {
			return l
		}
		l := 0
		if hops <= len(w.Tasks) { // a cycle cannot be enqueued; never loop on one
			for _, d := range t.DependsOn {
				if dt := byID[d]; dt != nil {
					l = max(l, depth(dt, hops+1)+1)
				}
			}
		}
		level[t.ID] = l
		return l
	}
	var out [][]*Task
	for _, t := range w.Tasks {
		l := depth(t, 0)
		for len(out) <= l {
			out = append(out, nil)
		}
		out[l] = append(out[l], t)
	}
	return out
}

// Label names a task of the workflow for people: its step name, else
// "#ID".
func (w *WorkflowInfo) Label(id int64) string {
	if s := w.Steps[id]; s != "" {
		return s
	}
	return "#" + strconv.FormatInt(id, 10)
}
