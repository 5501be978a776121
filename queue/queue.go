package queue

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/schema"
)

var (
	// ErrInvalidTask wraps every validation error of Enqueue: empty or long
	// name, payload that is not JSON or over its limit (see
	// DefaultMaxPayloadSize), option out of range. Nothing was inserted. A
	// task refused by the SQL enqueue functions, or by the task table's
	// checks, wraps it too.
	ErrInvalidTask = pgerr.ErrInvalidTask
	// ErrNotFound is returned for a task ID that does not exist.
	ErrNotFound = errors.New("skiplock: task not found")
	// ErrPermissionDenied is wrapped by the error of a call that the
	// database role may not make: it lacks a grant (see
	// migrations.Grants, or `skiplock migrate grants`). Nothing was changed.
	ErrPermissionDenied = pgerr.ErrPermissionDenied
	// ErrDuplicate is wrapped by the DuplicateError returned, when the
	// task asks for it with WithDuplicateError, for a task whose unique
	// key is taken.
	ErrDuplicate = errors.New("skiplock: duplicate task")
)

// NoSchemaError is returned (wrapping migrations.ErrNotMigrated) by the
// client's calls, migrations.Up and a starting worker when no schema of the
// search_path exists: it names the schema to create.
type NoSchemaError = pgerr.NoSchemaError

// EnqueueResult is the outcome of enqueueing one task. A task whose unique
// key is taken is an outcome, not a failure: the error is nil and
// Duplicate is set (WithDuplicateError makes it an error too).
type EnqueueResult struct {
	// ID is the task's ID: the inserted task's, the replaced task's when
	// Replaced, or the existing task's when Duplicate (0 if that task
	// finished meanwhile, leaving the key free).
	ID int64
	// Duplicate reports that a task with the same unique key exists (its
	// ID is ID) and nothing was inserted.
	Duplicate bool
	// Replaced reports that a pending task with the same replace key
	// (WithReplaceKey, WithDebounce) was replaced: it kept its ID, ID,
	// and took this call's contents. False when the call inserted a new
	// task.
	Replaced bool
}

// DuplicateError reports a task that was not inserted because another task
// holds its unique key. It is returned only for a task enqueued with
// WithDuplicateError; EnqueueMany joins one for each such task.
type DuplicateError struct {
	Index      int    // position in the EnqueueMany batch; 0 for Enqueue
	Key        string // the unique key, with its window when it has one
	ExistingID int64  // the task holding the key; 0 if it finished meanwhile
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("skiplock: duplicate task: unique key %q is held by task %d", e.Key, e.ExistingID)
}

// Unwrap makes errors.Is(err, ErrDuplicate) hold.
func (e *DuplicateError) Unwrap() error { return ErrDuplicate }

// insertChunk bounds one INSERT statement of EnqueueMany, keeping its
// parameter arrays well under the protocol's message size; copyChunk bounds
// one COPY (and the tasks prepared in memory at once).
const (
	insertChunk = 5000
	copyChunk   = 50_000
)

// Client enqueues and reads tasks. It is safe for concurrent use.
type Client struct {
	pool    *pgxpool.Pool
	exec    pgerr.Executor // pool, its errors interpreted
	queries *db.Queries
	schema  schemaCache
	hooks   []EnqueueHook
	group   groupCommit
	limits  inputLimits
	keyring *Keyring // nil: payloads in clear
}

// New returns a Client on pool. The pool's search_path must reach the schema
// skiplock was migrated into.
func New(pool *pgxpool.Pool, opts ...ClientOption) *Client {
	c := &Client{pool: pool, exec: pgerr.Interpreting(pool), queries: db.New(), limits: defaultInputLimits}
	c.group.client = c
	for _, o := range opts {
		o(c)
	}
	return c
}

// NewTask is one task for EnqueueMany.
type NewTask struct {
	Name    string
	Payload any
	Options []Option
}

// Enqueue inserts a task and returns its result, which holds its ID.
// payload is any value that encoding/json can marshal, or a
// json.RawMessage or []byte holding JSON.
// The task is visible to workers at once (or at its run time), and idle
// workers are woken by NOTIFY.
//
// Concurrent calls share statements and commits (group commit): a lone call
// is sent at once, and calls made while a statement is in flight go
// together in the next, so many producers are not limited to one commit,
// one WAL flush, each. ctx can abandon a call only until its statement is
// sent; after that Enqueue waits for the outcome, so that it never reports
// a failure for a task that exists.
//
// A task whose unique key is taken is not inserted: the result has
// Duplicate set and the existing task's ID, and the error is nil (unless
// the task has WithDuplicateError).
//
// With an Actor in ctx (WithActor), the enqueue is an operator's: the task
// and its audit record are inserted in one transaction of their own.
func (c *Client) Enqueue(ctx context.Context, name string, payload any, opts ...Option) (EnqueueResult, error) {
	res, err := c.enqueue(ctx, name, payload, opts)
	return res, c.explain(ctx, err)
}

func (c *Client) enqueue(ctx context.Context, name string, payload any, opts []Option) (EnqueueResult, error) {
	r, err := prepare(NewTask{Name: name, Payload: payload, Options: opts}, c.limits, c.keyring)
	if err != nil {
		return EnqueueResult{}, err
	}
	rows := []row{r}
	hooked, err := c.beforeEnqueue(ctx, rows) // may amend rows[0]'s metadata
	if err != nil {
		return EnqueueResult{}, err
	}
	a, err := c.enqueueAudit(ctx, nil)
	if err != nil {
		return EnqueueResult{}, err
	}
	if a != nil {
		// Enqueued by hand: the task and its audit record in one
		// transaction, not group-committed with producers' tasks.
		var ids []int64
		var dups []*DuplicateError
		err := a.once(ctx, func(tx pgerr.Executor) (int64, error) {
			var err error
			if len(rows[0].dependsOn) > 0 || rows[0].replaceKey != "" {
				ids, dups, err = c.insertEach(ctx, tx, rows)
			} else {
				ids, dups, err = c.insertRows(ctx, tx, rows, nil)
			}
			if err != nil {
				return 0, err
			}
			a.request = enqueueRequest(rows, ids)
			return int64(len(rows) - len(dups)), nil
		})
		if err != nil {
			return EnqueueResult{}, err
		}
		return c.enqueued(ctx, hooked, rows, ids, dups)
	}
	if rows[0].replaceKey != "" {
		// Not group-committed: its statement may wait for the row lock
		// of the task it replaces, and the tasks of other callers would
		// wait with it.
		id, err := c.insertReplacing(ctx, c.pool, rows[0])
		if err != nil {
			return EnqueueResult{}, err
		}
		return c.enqueued(ctx, hooked, rows, []int64{id}, nil)
	}
	if rows[0].sequenceKey != "" || len(rows[0].dependsOn) > 0 {
		// Not group-committed: a sequenced task waits for the lock of its
		// key, a dependent one locks its dependencies, and the tasks of
		// other callers would wait with them.
		var ids []int64
		var dups []*DuplicateError
		if rows[0].sequenceKey != "" {
			ids, dups, err = c.insertRows(ctx, c.pool, rows, nil)
		} else {
			err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
				var err error
				ids, dups, err = c.insertEach(ctx, tx, rows)
				return err
			})
		}
		if err != nil {
			return EnqueueResult{}, pgerr.Interpret(err)
		}
		return c.enqueued(ctx, hooked, rows, ids, dups)
	}
	res := c.group.enqueue(ctx, rows[0])
	if res.err != nil {
		return EnqueueResult{}, res.err
	}
	var dups []*DuplicateError
	if res.dup != nil {
		dups = []*DuplicateError{res.dup}
	}
	return c.enqueued(ctx, hooked, rows, []int64{res.id}, dups)
}

// enqueued tells the hooks about the one task Enqueue inserted, if it
// was not a duplicate, and returns its result.
func (c *Client) enqueued(ctx context.Context, hooked []*EnqueuedTask, rows []row, ids []int64, dups []*DuplicateError) (EnqueueResult, error) {
	c.afterEnqueue(ctx, hooked, ids)
	res, err := results(rows, ids, dups)
	return res[0], err
}

// results turns the outcome of inserting rows, their IDs (0 for a
// duplicate) and their duplicates, into their EnqueueResults, and joins
// the DuplicateErrors of the duplicates whose task asked for one
// (WithDuplicateError).
func results(rows []row, ids []int64, dups []*DuplicateError) ([]EnqueueResult, error) {
	out := make([]EnqueueResult, len(rows))
	for i, id := range ids {
		out[i].ID = id
		if rows[i].replaced != nil {
			out[i].Replaced = *rows[i].replaced
		}
	}
	var errs []error
	for _, d := range dups {
		out[d.Index] = EnqueueResult{ID: d.ExistingID, Duplicate: true}
		if rows[d.Index].duplicateError {
			errs = append(errs, d)
		}
	}
	return out, errors.Join(errs...)
}

// Executor is what EnqueueTx writes through: a pgx.Tx in practice, so the
// task exists if and only if the caller's transaction commits. A
// *pgxpool.Pool or *pgx.Conn also works. An Executor that can also
// CopyFrom (all three can) takes EnqueueManyTx's faster COPY path.
type Executor interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// The executors of pgx are Executors.
var (
	_ Executor = pgx.Tx(nil)
	_ Executor = (*pgx.Conn)(nil)
	_ Executor = (*pgxpool.Pool)(nil)
)

// EnqueueTx inserts a task within tx: it exists if and only if tx commits,
// and workers are woken at commit. A task whose unique key is taken is a
// Duplicate result, as with Enqueue.
func (c *Client) EnqueueTx(ctx context.Context, tx Executor, name string, payload any, opts ...Option) (EnqueueResult, error) {
	res, err := c.EnqueueManyTx(ctx, tx, []NewTask{{Name: name, Payload: payload, Options: opts}})
	if res == nil {
		return EnqueueResult{}, c.explain(ctx, err)
	}
	return res[0], err
}

// EnqueueMany inserts tasks in one transaction and returns their results
// in order, one for each task. An invalid task inserts none. Tasks whose
// unique key is taken are skipped, while the others are inserted: their
// results have Duplicate set and the existing tasks' IDs, and the error is
// nil. The error joins a *DuplicateError for each of them that has
// WithDuplicateError, and the results are returned with it.
func (c *Client) EnqueueMany(ctx context.Context, tasks []NewTask) ([]EnqueueResult, error) {
	var res []EnqueueResult
	var dupErr error
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		res, err = c.EnqueueManyTx(ctx, tx, tasks) // the raw tx: it can COPY
		if res != nil && errors.Is(err, ErrDuplicate) {
			dupErr = err // commit the others
			return nil
		}
		return err
	})
	if err != nil {
		return nil, pgerr.Interpret(err)
	}
	return res, dupErr
}

// EnqueueManyTx is EnqueueMany within tx.
func (c *Client) EnqueueManyTx(ctx context.Context, tx Executor, tasks []NewTask) ([]EnqueueResult, error) {
	a, err := c.enqueueAudit(ctx, pgerr.Interpreting(tx))
	if err != nil {
		return nil, err
	}
	res := make([]EnqueueResult, 0, len(tasks))
	var dups []error
	for start := 0; start < len(tasks); start += copyChunk {
		chunk, err := c.insert(ctx, tx, tasks[start:min(start+copyChunk, len(tasks))])
		if chunk == nil {
			return nil, c.explain(ctx, err)
		}
		if err != nil {
			for _, e := range unjoin(err) {
				if d, ok := e.(*DuplicateError); ok {
					d.Index += start
				}
				dups = append(dups, e)
			}
		}
		res = append(res, chunk...)
	}
	if a != nil {
		inserted := make([]int64, 0, len(res))
		for _, r := range res {
			if !r.Duplicate {
				inserted = append(inserted, r.ID)
			}
		}
		a.request = enqueueRequest(tasksRows(tasks), inserted)
		if err := a.insert(ctx, a.tx, int64(len(inserted))); err != nil {
			return nil, err
		}
	}
	return res, errors.Join(dups...)
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// epoch tells TaskInsertMany to compute run_at on the database's clock.
var epoch = time.Unix(0, 0).UTC()

// insert inserts a chunk of EnqueueManyTx: its results, and the
// DuplicateErrors its tasks asked for, joined; no results on a failure.
func (c *Client) insert(ctx context.Context, tx Executor, tasks []NewTask) ([]EnqueueResult, error) {
	rows := make([]row, len(tasks))
	for i, t := range tasks {
		var err error
		if rows[i], err = prepare(t, c.limits, c.keyring); err != nil {
			return nil, err
		}
	}
	hooked, err := c.beforeEnqueue(ctx, rows)
	if err != nil {
		return nil, err
	}
	var ids []int64
	var dups []*DuplicateError
	if withReplaceKeys(rows) {
		ids, dups, err = c.insertWithReplaceKeys(ctx, tx, rows)
	} else if withDependencies(rows) {
		ids, dups, err = c.insertEach(ctx, tx, rows)
	} else if cp, ok := copyable(tx, rows); ok && len(rows) > 1 {
		ids, err = c.copyRows(ctx, tx, cp, rows)
	} else {
		ids, dups, err = c.insertChunks(ctx, tx, rows)
	}
	if err != nil {
		return nil, err
	}
	c.afterEnqueue(ctx, hooked, ids)
	return results(rows, ids, dups)
}

// explain replaces migrations.ErrNotMigrated, which is what a table out of reach
// gives, with the reason schema.Read finds when it finds one: no schema
// of the search_path exists, or the role has no USAGE on it (PostgreSQL
// then leaves it out of the search_path). It asks on the client's pool:
// err's transaction, if any, is aborted.
func (c *Client) explain(ctx context.Context, err error) error {
	var noSchema *NoSchemaError
	if !errors.Is(err, pgerr.ErrNotMigrated) || errors.As(err, &noSchema) || ctx.Err() != nil || c.pool == nil {
		return err
	}
	if _, rerr := schema.Read(ctx, c.pool); errors.Is(rerr, ErrPermissionDenied) || errors.As(rerr, &noSchema) {
		return fmt.Errorf("enqueueing: %w", rerr)
	}
	return err
}

// inTx runs fn in a transaction on the client's pool; every error comes out
// interpreted.
func (c *Client) inTx(ctx context.Context, fn func(tx pgerr.Executor) error) error {
	return pgerr.Interpret(pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		return fn(pgerr.Interpreting(tx))
	}))
}

// row is a validated task, ready to insert.
type row struct {
	queue, name                              string
	payload, metadata                        json.RawMessage
	priority                                 int16
	runAt                                    time.Time
	delayMs, timeoutMs                       int64
	maxAttempts                              int32
	uniqueKey, uniqueWindowKey, exclusiveKey string
	dependsOn                                []int64
	depFailure                               DependencyFailure
	limitKey                                 string
	sequenceKey                              string
	sequenceHold                             bool
	replaceKey                               string
	replaced                                 *bool // with a replace key: set by insertReplacing
	duplicateError                           bool  // WithDuplicateError
}

// prepare validates a task and encodes it, encrypting its payload with kr's
// current key when kr is not nil; nothing is sent. Its metadata's size is
// checked once the hooks have added theirs (beforeEnqueue).
func prepare(t NewTask, limits inputLimits, kr *Keyring) (row, error) {
	if err := checkLength("task name", t.Name, true, MaxNameLength, "queue.MaxNameLength"); err != nil {
		return row{}, err
	}
	payload, err := schema.EncodePayload(t.Payload)
	if err != nil {
		return row{}, fmt.Errorf("%w: task %q: %v", ErrInvalidTask, t.Name, err)
	}
	if err := checkSize(t.Name, "payload", len(payload), limits.payload, "queue.WithMaxPayloadSize"); err != nil {
		return row{}, err
	}
	o, err := buildOptions(t.Options)
	if err != nil {
		return row{}, fmt.Errorf("task %q: %w", t.Name, err)
	}
	r := row{
		queue: o.queue, name: t.Name, payload: payload, metadata: o.metadata,
		priority: int16(o.priority), runAt: epoch, delayMs: o.delay.Milliseconds(),
		maxAttempts: int32(o.maxAttempts), timeoutMs: o.timeout.Milliseconds(), exclusiveKey: o.exclusiveKey,
		dependsOn: o.dependsOn, depFailure: o.depFailure,
		limitKey: o.limitKey, sequenceKey: o.sequenceKey, sequenceHold: o.sequenceHold,
		replaceKey: o.replaceKey, duplicateError: o.duplicateErr,
	}
	if o.replaceKey != "" {
		r.replaced = new(bool)
	}
	if !o.runAt.IsZero() {
		r.runAt = o.runAt
	}
	key := o.uniqueKey
	if o.uniqueDerive && key == "" {
		key = deriveKey(t.Name, payload)
	}
	if kr != nil {
		// After deriveKey: the same payload has the same key, whatever
		// its nonce.
		if r.payload, err = kr.Encrypt(t.Name, payload); err != nil {
			return row{}, fmt.Errorf("task %q: %w", t.Name, err)
		}
	}
	if o.uniqueWindow > 0 {
		// The window is the producer's clock: a window boundary may be off
		// by the skew between producers, never the uniqueness.
		r.uniqueWindowKey = fmt.Sprintf("%s@%d", key, time.Now().UnixNano()/int64(o.uniqueWindow))
	} else {
		r.uniqueKey = key
	}
	return r, nil
}

// insertChunks inserts prepared tasks insertChunk at a time. The first
// chunk locks the sequence keys of every chunk, so that a batch takes its
// locks in one order.
func (c *Client) insertChunks(ctx context.Context, tx Executor, rows []row) ([]int64, []*DuplicateError, error) {
	if len(rows) <= insertChunk {
		return c.insertRows(ctx, tx, rows, nil)
	}
	var lockKeys []string
	if withSequences(rows) {
		lockKeys = sequenceKeys(rows)
	}
	ids := make([]int64, 0, len(rows))
	var dups []*DuplicateError
	for start := 0; start < len(rows); start += insertChunk {
		chunk, chunkDups, err := c.insertRows(ctx, tx, rows[start:min(start+insertChunk, len(rows))], lockKeys)
		lockKeys = nil
		if err != nil {
			return nil, nil, err
		}
		for _, d := range chunkDups {
			d.Index += start
		}
		ids = append(ids, chunk...)
		dups = append(dups, chunkDups...)
	}
	return ids, dups, nil
}

// insertRows inserts prepared tasks in one statement. A task whose unique
// key is taken is not inserted: its id is 0 and it has a DuplicateError
// (Index is its place in rows). Rows with sequence keys go through
// TaskInsertSequenced, which locks lockKeys (by default their own keys)
// before it decides which of them wait.
func (c *Client) insertRows(ctx context.Context, tx Executor, rows []row, lockKeys []string) ([]int64, []*DuplicateError, error) {
	n := len(rows)
	p := db.TaskInsertManyParams{
		Queues:           make([]string, n),
		Names:            make([]string, n),
		Payloads:         make([]json.RawMessage, n),
		Metadatas:        make([]json.RawMessage, n),
		Priorities:       make([]int16, n),
		RunAts:           make([]time.Time, n),
		DelayMs:          make([]int64, n),
		MaxAttempts:      make([]int32, n),
		TimeoutMs:        make([]int64, n),
		UniqueKeys:       make([]string, n),
		UniqueWindowKeys: make([]string, n),
		ExclusiveKeys:    make([]string, n),
		LimitKeys:        make([]string, n),
	}
	for i, r := range rows {
		p.Queues[i], p.Names[i], p.Payloads[i], p.Metadatas[i] = r.queue, r.name, r.payload, r.metadata
		p.Priorities[i], p.RunAts[i], p.DelayMs[i] = r.priority, r.runAt, r.delayMs
		p.MaxAttempts[i], p.TimeoutMs[i] = r.maxAttempts, r.timeoutMs
		p.UniqueKeys[i], p.UniqueWindowKeys[i], p.ExclusiveKeys[i] = r.uniqueKey, r.uniqueWindowKey, r.exclusiveKey
		p.LimitKeys[i] = r.limitKey
	}
	var inserted []db.TaskInsertManyRow
	var err error
	switch {
	case withSequences(rows):
		inserted, err = c.insertSequenced(ctx, tx, p, rows, lockKeys)
	case withUniqueKeys(rows):
		inserted, err = c.queries.TaskInsertMany(ctx, pgerr.Interpreting(tx), p)
	default:
		inserted, err = c.insertPlain(ctx, tx, p)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("enqueueing: %w", err)
	}
	// Rows come back in input order; a task missing from them lost its
	// unique key to an existing task (or to an earlier one in the batch).
	ids := make([]int64, n)
	var dups []*DuplicateError
	next := 0
	for i := range n {
		if next < len(inserted) && inserted[next].UniqueKey == p.UniqueKeys[i] && inserted[next].UniqueWindowKey == p.UniqueWindowKeys[i] {
			ids[i] = inserted[next].ID
			next++
			continue
		}
		key := p.UniqueKeys[i] + p.UniqueWindowKeys[i]
		if key == "" {
			return nil, nil, fmt.Errorf("enqueueing: task %d of the batch was not inserted", i)
		}
		dups = append(dups, &DuplicateError{Index: i, Key: key})
	}
	if len(dups) > 0 {
		if err := c.fillDuplicates(ctx, tx, p, dups); err != nil {
			return nil, nil, err
		}
	}
	return ids, dups, nil
}

// withUniqueKeys reports whether a task of rows has a unique key, which
// only TaskInsertMany's ON CONFLICT DO NOTHING can skip.
func withUniqueKeys(rows []row) bool {
	for i := range rows {
		if rows[i].uniqueKey != "" || rows[i].uniqueWindowKey != "" {
			return true
		}
	}
	return false
}

// insertPlain is TaskInsertMany for a batch without unique keys, in which
// no row can conflict (TaskInsertManyPlain).
func (c *Client) insertPlain(ctx context.Context, tx Executor, p db.TaskInsertManyParams) ([]db.TaskInsertManyRow, error) {
	inserted, err := c.queries.TaskInsertManyPlain(ctx, pgerr.Interpreting(tx), db.TaskInsertManyPlainParams{
		Queues: p.Queues, Names: p.Names, Payloads: p.Payloads, Metadatas: p.Metadatas, Priorities: p.Priorities,
		RunAts: p.RunAts, DelayMs: p.DelayMs, MaxAttempts: p.MaxAttempts, TimeoutMs: p.TimeoutMs,
		ExclusiveKeys: p.ExclusiveKeys, LimitKeys: p.LimitKeys,
	})
	if err != nil {
		return nil, err
	}
	return insertedRows(inserted), nil
}

// insertedRows is the rows of an insert statement of TaskInsertMany's
// columns as TaskInsertMany's own.
func insertedRows[R ~struct {
	ID              int64
	UniqueKey       string
	UniqueWindowKey string
}](rows []R) []db.TaskInsertManyRow {
	out := make([]db.TaskInsertManyRow, len(rows))
	for i, r := range rows {
		out[i] = db.TaskInsertManyRow(r)
	}
	return out
}

// fillDuplicates finds the tasks that hold the keys of the duplicates.
func (c *Client) fillDuplicates(ctx context.Context, tx Executor, p db.TaskInsertManyParams, dups []*DuplicateError) error {
	var keys, windowKeys []string
	for _, d := range dups {
		if p.UniqueWindowKeys[d.Index] != "" {
			windowKeys = append(windowKeys, d.Key)
		} else {
			keys = append(keys, d.Key)
		}
	}
	holders, err := c.queries.TaskUniqueHolders(ctx, pgerr.Interpreting(tx), db.TaskUniqueHoldersParams{UniqueKeys: keys, UniqueWindowKeys: windowKeys})
	if err != nil {
		return fmt.Errorf("enqueueing: finding the holders of unique keys: %w", err)
	}
	byKey := map[string]int64{}
	for _, h := range holders {
		byKey[h.UniqueKey+h.UniqueWindowKey] = h.ID
	}
	for _, d := range dups {
		d.ExistingID = byKey[d.Key]
	}
	return nil
}

// deriveKey is WithUnique's key: the name and a digest of the payload.
func deriveKey(name string, payload json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, payload) != nil {
		buf.Reset()
		buf.Write(payload)
	}
	sum := sha256.Sum256(buf.Bytes())
	return name + ":" + hex.EncodeToString(sum[:16])
}

// Get returns the task with the given ID, or ErrNotFound.
func (c *Client) Get(ctx context.Context, id int64) (*Task, error) {
	row, err := c.queries.TaskGet(ctx, c.exec, id)
	if errors.Is(err, pgerr.ErrNotFound) {
		return nil, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("getting task %d: %w", id, err)
	}
	return taskFromRow(row)
}
