package bench

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/queue"
)

// This file is a prototype, kept in the bench so that it can be measured
// beside queue.EnqueueMany before anyone decides to move it into the queue
// package: EnqueueMany over COPY instead of INSERT ... SELECT unnest(...).
//
// COPY cannot return the rows it wrote, and EnqueueMany must return IDs in
// order. The prototype reserves them first, in one round trip, from the
// identity column's sequence, and copies them in with the rows: COPY FROM
// always writes the values it is given for an identity column, as INSERT
// does with OVERRIDING SYSTEM VALUE. IDs stay unique because they come from
// the same sequence as every other insert; a failed COPY leaves a gap, as a
// failed INSERT does. run_at, timeout_ms and the other columns keep their
// defaults (run_at = now(), the transaction's start, as TaskInsertMany
// computes it), and the AFTER INSERT statement trigger fires once per COPY,
// so workers get one notification per queue, as today.

// copyTask is a task for the prototype. queue.Option values are closures
// over an unexported type, so the prototype takes the fields it needs
// directly; a real implementation would reuse the queue package's option
// handling.
type copyTask struct {
	Queue       string
	Name        string
	Payload     any
	Priority    int16
	MaxAttempts int32
}

// copier is what the prototype writes through: a pgx.Tx, *pgx.Conn or
// *pgxpool.Pool.
type copier interface {
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// reserveIDs takes n values from the identity sequence of skiplock_tasks, in
// ascending order.
const reserveIDs = `SELECT nextval(pg_get_serial_sequence('skiplock_tasks', 'id')) FROM generate_series(1, $1::integer)`

// copyEnqueue inserts tasks with one COPY. With withIDs it returns their IDs
// in order, at the price of one more round trip; without, it returns nil.
// Tasks are validated as Enqueue validates them; an invalid task fails the
// whole COPY and nothing is inserted.
func copyEnqueue(ctx context.Context, db copier, tasks []copyTask, withIDs bool) ([]int64, error) {
	src := &copySource{tasks: tasks, i: -1}
	columns := []string{"queue", "name", "payload", "metadata", "priority", "max_attempts"}
	if withIDs {
		rows, err := db.Query(ctx, reserveIDs, len(tasks))
		if err != nil {
			return nil, fmt.Errorf("reserving task ids: %w", err)
		}
		src.ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, fmt.Errorf("reserving task ids: %w", err)
		}
		columns = append([]string{"id"}, columns...)
	}
	src.row = make([]any, len(columns))
	n, err := db.CopyFrom(ctx, pgx.Identifier{"skiplock_tasks"}, columns, src)
	if src.err != nil {
		// pgx reports it as the server's "COPY from stdin failed"; keep
		// the original, which wraps ErrInvalidTask.
		return nil, src.err
	}
	if err != nil {
		return nil, fmt.Errorf("enqueueing: %w", err)
	}
	if n != int64(len(tasks)) {
		return nil, fmt.Errorf("enqueueing: copied %d of %d tasks", n, len(tasks))
	}
	return src.ids, nil
}

var emptyObject = json.RawMessage(`{}`)

// copySource feeds tasks to CopyFrom one row at a time, reusing one row
// slice: pgx encodes each row before asking for the next.
type copySource struct {
	tasks []copyTask
	ids   []int64
	i     int
	row   []any
	err   error
}

func (s *copySource) Next() bool {
	s.i++
	return s.i < len(s.tasks)
}

func (s *copySource) Values() ([]any, error) {
	row, err := s.values()
	if err != nil {
		s.err = err
	}
	return row, err
}

func (s *copySource) values() ([]any, error) {
	t := s.tasks[s.i]
	if t.Name == "" || len(t.Name) > queue.MaxNameLength {
		return nil, fmt.Errorf("%w: name must be 1 to %d bytes, got %q", queue.ErrInvalidTask, queue.MaxNameLength, t.Name)
	}
	q := t.Queue
	if q == "" {
		q = queue.DefaultQueue
	}
	payload, err := queue.EncodePayload(t.Payload)
	if err != nil {
		return nil, fmt.Errorf("%w: task %q: %v", queue.ErrInvalidTask, t.Name, err)
	}
	attempts := t.MaxAttempts
	if attempts == 0 {
		attempts = queue.DefaultMaxAttempts
	}
	r := s.row
	if s.ids != nil {
		r[0], r = s.ids[s.i], r[1:]
	}
	r[0], r[1], r[2], r[3], r[4], r[5] = q, t.Name, payload, emptyObject, t.Priority, attempts
	return s.row, nil
}

func (s *copySource) Err() error { return s.err }
