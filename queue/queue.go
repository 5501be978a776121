package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

var (
	// ErrInvalidTask wraps every validation error of Enqueue: empty or long
	// name, payload that is not JSON, option out of range. Nothing was
	// inserted.
	ErrInvalidTask = errors.New("skiplock: invalid task")
	// ErrNotFound is returned for a task ID that does not exist.
	ErrNotFound = errors.New("skiplock: task not found")
	// ErrNotMigrated is returned when skiplock's tables are missing: run
	// `skiplock migrate up` or migrations.Up.
	ErrNotMigrated = pgerr.ErrNotMigrated
)

// insertChunk bounds one INSERT statement of EnqueueMany, keeping its
// parameter arrays well under the protocol's message size.
const insertChunk = 5000

// Client enqueues and reads tasks. It is safe for concurrent use.
type Client struct {
	pool    *pgxpool.Pool
	queries *db.Queries
}

// New returns a Client on pool. The pool's search_path must reach the schema
// skiplock was migrated into.
func New(pool *pgxpool.Pool) *Client {
	return &Client{pool: pool, queries: db.New()}
}

// NewTask is one task for EnqueueMany.
type NewTask struct {
	Name    string
	Payload any
	Options []Option
}

// Enqueue inserts a task and returns its ID. payload is any value that
// encoding/json can marshal, or a json.RawMessage or []byte holding JSON.
// The task is visible to workers at once (or at its run time), and idle
// workers are woken by NOTIFY.
func (c *Client) Enqueue(ctx context.Context, name string, payload any, opts ...Option) (int64, error) {
	return c.EnqueueTx(ctx, c.pool, name, payload, opts...)
}

// Executor is what EnqueueTx writes through: a pgx.Tx in practice, so the
// task exists if and only if the caller's transaction commits. A
// *pgxpool.Pool or *pgx.Conn also works.
type Executor = db.DBTX

// EnqueueTx inserts a task within tx: it exists if and only if tx commits,
// and workers are woken at commit.
func (c *Client) EnqueueTx(ctx context.Context, tx Executor, name string, payload any, opts ...Option) (int64, error) {
	ids, err := c.insert(ctx, tx, []NewTask{{Name: name, Payload: payload, Options: opts}})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// EnqueueMany inserts tasks in one transaction, all or none, and returns
// their IDs in order.
func (c *Client) EnqueueMany(ctx context.Context, tasks []NewTask) ([]int64, error) {
	var ids []int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		ids, err = c.EnqueueManyTx(ctx, tx, tasks)
		return err
	})
	return ids, err
}

// EnqueueManyTx inserts tasks within tx and returns their IDs in order.
func (c *Client) EnqueueManyTx(ctx context.Context, tx Executor, tasks []NewTask) ([]int64, error) {
	ids := make([]int64, 0, len(tasks))
	for start := 0; start < len(tasks); start += insertChunk {
		chunk, err := c.insert(ctx, tx, tasks[start:min(start+insertChunk, len(tasks))])
		if err != nil {
			return nil, err
		}
		ids = append(ids, chunk...)
	}
	return ids, nil
}

// epoch tells TaskInsertMany to compute run_at on the database's clock.
var epoch = time.Unix(0, 0).UTC()

func (c *Client) insert(ctx context.Context, tx Executor, tasks []NewTask) ([]int64, error) {
	n := len(tasks)
	p := db.TaskInsertManyParams{
		Queues:      make([]string, n),
		Names:       make([]string, n),
		Payloads:    make([]json.RawMessage, n),
		Metadatas:   make([]json.RawMessage, n),
		Priorities:  make([]int16, n),
		RunAts:      make([]time.Time, n),
		DelayMs:     make([]int64, n),
		MaxAttempts: make([]int32, n),
		TimeoutMs:   make([]int64, n),
	}
	for i, t := range tasks {
		if t.Name == "" || len(t.Name) > MaxNameLength {
			return nil, fmt.Errorf("%w: name must be 1 to %d bytes, got %q", ErrInvalidTask, MaxNameLength, t.Name)
		}
		payload, err := EncodePayload(t.Payload)
		if err != nil {
			return nil, fmt.Errorf("%w: task %q: %v", ErrInvalidTask, t.Name, err)
		}
		o, err := buildOptions(t.Options)
		if err != nil {
			return nil, fmt.Errorf("task %q: %w", t.Name, err)
		}
		p.Queues[i] = o.queue
		p.Names[i] = t.Name
		p.Payloads[i] = payload
		p.Metadatas[i] = o.metadata
		p.Priorities[i] = int16(o.priority)
		p.RunAts[i] = epoch
		if !o.runAt.IsZero() {
			p.RunAts[i] = o.runAt
		}
		p.DelayMs[i] = o.delay.Milliseconds()
		p.MaxAttempts[i] = int32(o.maxAttempts)
		p.TimeoutMs[i] = o.timeout.Milliseconds()
	}
	ids, err := c.queries.TaskInsertMany(ctx, tx, p)
	if err != nil {
		return nil, fmt.Errorf("enqueueing: %w", pgerr.Wrap(err))
	}
	if len(ids) != n {
		return nil, fmt.Errorf("enqueueing: inserted %d of %d tasks", len(ids), n)
	}
	return ids, nil
}

// EncodePayload turns a payload into the JSON stored in the task: []byte and
// json.RawMessage must already be valid JSON; nil is JSON null; anything else
// goes through json.Marshal.
func EncodePayload(payload any) (json.RawMessage, error) {
	var raw []byte
	switch v := payload.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("payload cannot be encoded as JSON: %w", err)
		}
		return b, nil
	}
	if raw == nil {
		return json.RawMessage("null"), nil
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("payload is not valid JSON: %.60q", raw)
	}
	return raw, nil
}

// Get returns the task with the given ID, or ErrNotFound.
func (c *Client) Get(ctx context.Context, id int64) (*Task, error) {
	row, err := c.queries.TaskGet(ctx, c.pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("getting task %d: %w", id, pgerr.Wrap(err))
	}
	return TaskFromRow(row)
}

// Pool returns the pool the client was built on.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }
