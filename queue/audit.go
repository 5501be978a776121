package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"sync"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/defaults"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// The audit trail: every operator change (Requeue, Cancel, Delete, Purge,
// RunNow, PauseQueue, ResumeQueue, SetLimit, RemoveLimit, the changes of
// stored schedules, and an enqueue made with an Actor) records who made
// it, what was asked, when, and how many tasks it changed, in
// skiplock_audit: one record per call.
//
// A change made in one transaction writes its record in that transaction
// (the caller's, for the Tx methods): if the record cannot be written the
// change fails and nothing changed, and a change rolled back (a dry run)
// leaves no record. A batched change (Requeue and Cancel of a filter or of
// more than a batch of IDs, Purge, RunNow and Delete of more than MaxBatch
// IDs) writes its record before its first
// batch, so that a record that cannot be written stops it before anything
// changed; each batch adds its count to the record in its own transaction,
// and the end sets FinishedAt and the error it stopped on. A record whose
// end could not be written (the connection lost, the process killed) keeps
// FinishedAt nil and counts every batch that committed.

// Source is where an operator change came from.
type Source string

// The sources of operator changes.
const (
	// SourceAPI is a program calling package queue, the default.
	SourceAPI Source = "api"
	// SourceCLI is the skiplock command.
	SourceCLI Source = "cli"
	// SourceDashboard is the dashboard (package dashboard, `skiplock ui`).
	SourceDashboard Source = "dashboard"
)

// Actor is who makes the operator changes of a context (WithActor), as the
// audit trail records them.
type Actor struct {
	// Name is who: a login, an email, an OS user. Recorded as given.
	Name string
	// Source is how. Defaults to SourceAPI; it must be one of the Source
	// constants.
	Source Source
}

type actorKey struct{}

// WithActor returns a context whose operator changes are recorded as made
// by a. Without one, a change is recorded with SourceAPI and the name of
// the OS user running the process (empty when it cannot be found); the
// database role is recorded either way. An enqueue (Enqueue, EnqueueTx,
// EnqueueMany, EnqueueManyTx, EnqueueWorkflow, EnqueueWorkflowTx) is
// recorded only when its context has an Actor: a producer's tasks are the
// application's work, a task enqueued by hand is an operator change.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the Actor of ctx, set by WithActor.
func ActorFrom(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(Actor)
	return a, ok
}

// processUser is the OS user running the process: the actor of a change
// made without one.
var processUser = sync.OnceValue(func() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	for _, k := range []string{"USER", "LOGNAME", "USERNAME"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
})

// actorOf returns the actor of ctx's changes, or the default one.
func actorOf(ctx context.Context) (Actor, error) {
	a, ok := ActorFrom(ctx)
	if !ok {
		return Actor{Name: processUser(), Source: SourceAPI}, nil
	}
	if a.Source == "" {
		a.Source = SourceAPI
	}
	if !slices.Contains([]Source{SourceAPI, SourceCLI, SourceDashboard}, a.Source) {
		return a, fmt.Errorf("%w: actor source %q is not %q, %q or %q", ErrInvalidRequest, a.Source, SourceAPI, SourceCLI, SourceDashboard)
	}
	return a, nil
}

// AuditAction is the kind of an operator change.
type AuditAction string

// The operator changes the audit trail records.
const (
	AuditRequeue       AuditAction = "requeue"        // Requeue, RequeueTx
	AuditCancel        AuditAction = "cancel"         // Cancel, CancelTx
	AuditCancelRunning AuditAction = "cancel-running" // Cancel, CancelTx of running tasks alone
	AuditDelete        AuditAction = "delete"         // Delete, DeleteTx
	AuditPurge         AuditAction = "purge"          // Purge, PurgeTx
	AuditRunNow        AuditAction = "run-now"        // RunNow, RunNowTx
	AuditPause         AuditAction = "pause"          // PauseQueue
	AuditResume        AuditAction = "resume"         // ResumeQueue
	AuditLimitSet      AuditAction = "limit-set"      // SetLimit
	AuditLimitRemove   AuditAction = "limit-remove"   // RemoveLimit
	AuditEnqueue       AuditAction = "enqueue"        // an enqueue with an Actor
	// The stored periodic schedules.
	AuditScheduleAdd    AuditAction = "schedule-add"    // AddSchedule
	AuditScheduleUpdate AuditAction = "schedule-set"    // UpdateSchedule
	AuditSchedulePause  AuditAction = "schedule-pause"  // PauseSchedule
	AuditScheduleResume AuditAction = "schedule-resume" // ResumeSchedule
	AuditScheduleRemove AuditAction = "schedule-remove" // RemoveSchedule
)

// AuditActions lists every AuditAction.
var AuditActions = []AuditAction{
	AuditRequeue, AuditCancel, AuditCancelRunning, AuditDelete, AuditPurge, AuditRunNow,
	AuditPause, AuditResume, AuditLimitSet, AuditLimitRemove, AuditEnqueue,
	AuditScheduleAdd, AuditScheduleUpdate, AuditSchedulePause, AuditScheduleResume, AuditScheduleRemove,
}

// AuditEntry is one operator change as the audit trail recorded it.
type AuditEntry struct {
	ID int64
	// At is when the change began.
	At time.Time
	// Actor is who made it (Actor.Name), DBRole the database role it was
	// made as.
	Actor  string
	DBRole string
	Source Source
	Action AuditAction
	// Request is what was asked, as JSON: the task IDs ("ids", the first
	// 1,000 of them, and "more_ids", how many more) or the "filter",
	// and the options ("queue", "limit", "reason", ...).
	Request json.RawMessage
	// Affected is how many tasks the change changed; for a queue paused or
	// resumed, a limit set or removed, or a schedule changed, 1.
	Affected int64
	// FinishedAt is when the change ended. Nil only for a batched change
	// still running, or interrupted before it could record its end.
	FinishedAt *time.Time
	// Error is what a batched change stopped on, after Affected tasks.
	Error string
}

// maxAuditIDs bounds the task IDs an audit record lists; "more_ids" counts
// the rest.
const maxAuditIDs = 1000

// MaxAuditLimit bounds AuditFilter.Limit.
const MaxAuditLimit = 10000

// AuditFilter selects audit records. Every field is optional.
type AuditFilter struct {
	// Since keeps records made at or after it.
	Since time.Time
	// Action keeps records of this action.
	Action AuditAction
	// Actor keeps records of this actor.
	Actor string
	// Source keeps records of this source.
	Source Source
	// BeforeID keeps records older than this one (a page's last ID), for
	// the next page.
	BeforeID int64
	// Limit bounds how many records AuditLog returns. Defaults to
	// 50, at most MaxAuditLimit (10,000).
	Limit int
}

// Validate returns the error, wrapping ErrInvalidRequest, that AuditLog
// would return for f; nil when f is valid.
func (f AuditFilter) Validate() error {
	switch {
	case f.Limit < 0 || f.Limit > MaxAuditLimit:
		return fmt.Errorf("%w: limit must be 1 to %d, got %d", ErrInvalidRequest, MaxAuditLimit, f.Limit)
	case f.BeforeID < 0:
		return fmt.Errorf("%w: before ID must be positive, got %d", ErrInvalidRequest, f.BeforeID)
	case f.Action != "" && !slices.Contains(AuditActions, f.Action):
		return fmt.Errorf("%w: unknown audit action %q", ErrInvalidRequest, f.Action)
	}
	return nil
}

// AuditLog lists the audit trail's records that f selects, the newest
// first (in the order they were made). The worker's retention deletes
// records older than worker.Config.RetainAudit (90 days by default).
func (c *Client) AuditLog(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit == 0 {
		limit = defaults.AuditLimit
	}
	p := db.AuditListParams{Since: optTime(f.Since), Actor: optString(f.Actor), MaxRows: int32(limit)}
	if f.Action != "" {
		p.Action = optString(string(f.Action))
	}
	if f.Source != "" {
		p.Source = optString(string(f.Source))
	}
	if f.BeforeID > 0 {
		p.BeforeID = &f.BeforeID
	}
	rows, err := c.queries.AuditList(ctx, c.exec, p)
	if err != nil {
		return nil, fmt.Errorf("listing the audit trail: %w", err)
	}
	out := make([]AuditEntry, len(rows))
	for i, r := range rows {
		out[i] = AuditEntry{
			ID: r.ID, At: r.At, Actor: r.Actor, DBRole: r.DbRole, Source: Source(r.Source), Action: AuditAction(r.Action),
			Request: r.Request, Affected: r.Affected, FinishedAt: r.FinishedAt, Error: deref(r.Error),
		}
	}
	return out, nil
}

// audit is the record of one operator change.
type audit struct {
	c       *Client
	actor   Actor
	action  AuditAction
	request json.RawMessage
	// tx is the caller's transaction, for the Tx methods; nil for a change
	// that makes its own.
	tx pgerr.Executor
	id int64 // a batched change's record, once begun
}

// newAudit prepares the record of a change through tx (nil: transactions
// of its own), made by ctx's actor. It fails, before anything is read or
// changed, for an invalid actor.
func (c *Client) newAudit(ctx context.Context, tx pgerr.Executor, action AuditAction, request map[string]any) (*audit, error) {
	actor, err := actorOf(ctx)
	if err != nil {
		return nil, err
	}
	req, err := json.Marshal(request)
	if err != nil {
		return nil, fmt.Errorf("recording %s in the audit trail: %w", action, err)
	}
	return &audit{c: c, actor: actor, action: action, request: req, tx: tx}, nil
}

// insert records a change that is done, in x: the transaction that made
// it. It reads nothing back, so a role that may only append records (a
// producer) can write it.
func (a *audit) insert(ctx context.Context, x pgerr.Executor, affected int64) error {
	err := a.c.queries.AuditRecord(ctx, x, db.AuditRecordParams{
		Actor: a.actor.Name, Source: string(a.actor.Source), Action: string(a.action),
		Request: a.request, Affected: affected,
	})
	if err != nil {
		return fmt.Errorf("recording %s in the audit trail: %w", a.action, err)
	}
	return nil
}

// once makes a change of one transaction, change, and records it in that
// transaction: the caller's, or a new one on the pool. change returns how
// many tasks it changed.
func (a *audit) once(ctx context.Context, change func(x pgerr.Executor) (int64, error)) error {
	run := func(x pgerr.Executor) error {
		n, err := change(x)
		if err != nil {
			return err
		}
		return a.insert(ctx, x, n)
	}
	if a.tx != nil {
		return run(a.tx)
	}
	return a.c.inTx(ctx, run)
}

// begin records a batched change before its first batch.
func (a *audit) begin(ctx context.Context) error {
	x := a.tx
	if x == nil {
		x = a.c.exec
	}
	id, err := a.c.queries.AuditBegin(ctx, x, db.AuditBeginParams{
		Actor: a.actor.Name, Source: string(a.actor.Source), Action: string(a.action), Request: a.request,
	})
	if err != nil {
		return fmt.Errorf("recording %s in the audit trail: %w", a.action, err)
	}
	a.id = id
	return nil
}

// batch makes one batch of a batched change, change, and adds its count to
// the record in the same transaction.
func (a *audit) batch(ctx context.Context, change func(x pgerr.Executor) (int64, error)) error {
	run := func(x pgerr.Executor) error {
		n, err := change(x)
		if err != nil || n == 0 {
			return err
		}
		if err := a.c.queries.AuditProgress(ctx, x, db.AuditProgressParams{ID: a.id, Added: n}); err != nil {
			return fmt.Errorf("recording %s in the audit trail: %w", a.action, err)
		}
		return nil
	}
	if a.tx != nil {
		return run(a.tx)
	}
	return a.c.inTx(ctx, run)
}

// finish records the end of a batched change, and the error it stopped on
// (failure), which it returns, joined with its own if the record cannot be
// written. It records even when ctx is done: an interrupted change says so.
func (a *audit) finish(ctx context.Context, failure error) error {
	x := a.tx
	if x == nil {
		x = a.c.exec
	} else if failure != nil {
		// The caller's transaction failed with the change: it takes the
		// record with it.
		return failure
	}
	var msg *string
	if failure != nil {
		s := failure.Error()
		msg = &s
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := a.c.queries.AuditFinish(ctx, x, db.AuditFinishParams{ID: a.id, Error: msg}); err != nil {
		return errors.Join(failure, fmt.Errorf("recording the end of %s in the audit trail: %w", a.action, err))
	}
	return failure
}

// changeIDs makes a change of named tasks (ids, sorted), chunk at a time,
// and fills res (Changed, IDs, Skipped): in one transaction with its record when the IDs fit in a
// chunk, else batch by batch, telling progress (if not nil) how many are
// done after each. change returns the IDs it changed.
func (c *Client) changeIDs(ctx context.Context, a *audit, ids []int64, chunk int, res *ChangeResult,
	progress func(done int64), change func(x pgerr.Executor, chunk []int64) ([]int64, error)) error {
	if progress == nil {
		progress = func(int64) {}
	}
	if len(ids) <= chunk {
		err := a.once(ctx, func(x pgerr.Executor) (int64, error) {
			done, err := change(x, ids)
			if err != nil {
				return 0, err
			}
			slices.Sort(done)
			res.IDs, res.Changed = done, int64(len(done))
			res.Skipped, err = c.skipped(ctx, x, ids, done)
			return int64(len(done)), err
		})
		if err != nil {
			*res = ChangeResult{IDs: []int64{}}
			return err
		}
		progress(int64(len(res.IDs)))
		return nil
	}
	if err := a.begin(ctx); err != nil {
		return err
	}
	for part := range slices.Chunk(ids, chunk) {
		var done []int64
		err := a.batch(ctx, func(x pgerr.Executor) (int64, error) {
			var err error
			done, err = change(x, part)
			return int64(len(done)), err
		})
		if err != nil {
			return a.finish(ctx, err)
		}
		res.IDs = append(res.IDs, done...)
		res.Changed = int64(len(res.IDs))
		progress(res.Changed)
	}
	if err := a.finish(ctx, nil); err != nil {
		return err
	}
	slices.Sort(res.IDs)
	x := a.tx
	if x == nil {
		x = c.exec
	}
	var err error
	res.Skipped, err = c.skipped(ctx, x, ids, res.IDs)
	return err
}

// enqueueAudit is the record of an enqueue through tx (nil: a transaction
// of its own) when ctx has an Actor, and nil without one.
func (c *Client) enqueueAudit(ctx context.Context, tx pgerr.Executor) (*audit, error) {
	if _, ok := ActorFrom(ctx); !ok {
		return nil, nil
	}
	return c.newAudit(ctx, tx, AuditEnqueue, map[string]any{})
}

// enqueueRequest is the request of an enqueue: the tasks' IDs, their names
// and queues. Payloads are not recorded: they may hold what an audit trail
// should not.
func enqueueRequest(rows []row, ids []int64) json.RawMessage {
	b, _ := json.Marshal(enqueueRequestMap(rows, ids))
	return b
}

func enqueueRequestMap(rows []row, ids []int64) map[string]any {
	m := idsRequest(ids)
	var names, queues []string
	for _, r := range rows {
		if !slices.Contains(names, r.name) && len(names) < 100 {
			names = append(names, r.name)
		}
		if !slices.Contains(queues, r.queue) && len(queues) < 100 {
			queues = append(queues, r.queue)
		}
	}
	m["names"], m["queues"] = names, queues
	return m
}

// tasksRows is the names and queues of tasks, for enqueueRequest.
func tasksRows(tasks []NewTask) []row {
	rows := make([]row, len(tasks))
	for i, t := range tasks {
		rows[i].name, rows[i].queue = t.Name, DefaultQueue
		if o, err := buildOptions(t.Options); err == nil {
			rows[i].queue = o.queue
		}
	}
	return rows
}

// idsRequest is the request of a change of named tasks.
func idsRequest(ids []int64) map[string]any {
	r := map[string]any{"ids": ids[:min(len(ids), maxAuditIDs)]}
	if len(ids) > maxAuditIDs {
		r["more_ids"] = len(ids) - maxAuditIDs
	}
	return r
}

// filterRequest is the request of a change of the tasks f selects.
func filterRequest(f Filter) map[string]any {
	m := map[string]any{}
	if len(f.Statuses) > 0 {
		m["statuses"] = f.Statuses
	}
	if len(f.Queues) > 0 {
		m["queues"] = f.Queues
	}
	if len(f.Names) > 0 {
		m["names"] = f.Names
	}
	if !f.Since.IsZero() {
		m["since"] = f.Since
	}
	if !f.FinishedBefore.IsZero() {
		m["finished_before"] = f.FinishedBefore
	}
	if f.ErrorContains != "" {
		m["error_contains"] = f.ErrorContains
	}
	if f.Sequence != "" {
		m["sequence"] = f.Sequence
	}
	return map[string]any{"filter": m}
}
