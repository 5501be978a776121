package db

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// TaskClaimPlainRows runs TaskClaimPlain and returns its rows as
// TaskClaimRow, which has the same fields, in one allocation of max rows:
// TaskClaimPlain grows its result by appending a copy of each row, and the
// worker then copied them all again into TaskClaimRow, about 1.1 kB of
// garbage per task claimed, the worker's largest. The statement, its
// parameters and the order of its columns are sqlc's (TaskClaimPlain
// above); TestTaskClaimPlainRows checks that both read the same rows, and
// TestHeldClaimRows every column of the held claim's (TaskClaimHeldRows).
//
// Written by hand, like doc.go: sqlc leaves this file alone.
func (q *Queries) TaskClaimPlainRows(ctx context.Context, db DBTX, arg TaskClaimPlainParams) ([]TaskClaimRow, error) {
	rows, err := db.Query(ctx, taskClaimPlain,
		arg.WorkerID,
		arg.LeaseMs,
		arg.LockClass,
		arg.UnlockIds,
		arg.LimitClass,
		arg.UnlockLimitLocks,
		arg.Queue,
		arg.UseAfter,
		arg.AfterPriority,
		arg.AfterRunAt,
		arg.AfterID,
		arg.OnlyNames,
		arg.SkipNames,
		arg.Max,
		arg.ExclusiveSeed,
	)
	if err != nil {
		return nil, err
	}
	return scanClaimRows(rows, arg.Max)
}

// TaskClaimHeldRows runs TaskClaimHeld, whose rows are TaskClaimPlain's
// (the same columns in the same order; its limit_locks is the block's
// key), and reads them as TaskClaimPlainRows does.
func (q *Queries) TaskClaimHeldRows(ctx context.Context, db DBTX, arg TaskClaimHeldParams) ([]TaskClaimRow, error) {
	rows, err := db.Query(ctx, taskClaimHeld,
		arg.WorkerID,
		arg.LockClass,
		arg.UnlockIds,
		arg.LimitClass,
		arg.UnlockLimitLocks,
		arg.Queue,
		arg.HeldLimitCounts,
		arg.HeldLimitLocks,
		arg.UseAfter,
		arg.AfterPriority,
		arg.AfterRunAt,
		arg.AfterID,
		arg.OnlyNames,
		arg.SkipNames,
		arg.Max,
		arg.ExclusiveSeed,
	)
	if err != nil {
		return nil, err
	}
	return scanClaimRows(rows, arg.Max)
}

// scanClaimRows reads a claim's rows (TaskClaimPlain's columns, in their
// order) into TaskClaimRow, in one allocation of max rows, and closes rows.
func scanClaimRows(rows pgx.Rows, max32 int32) ([]TaskClaimRow, error) {
	defer rows.Close()
	n := min(max(max32, 1), 10000)
	items := make([]TaskClaimRow, 0, n)
	// Per row, rows.Scan's arguments, a new time.Time for started_at, a
	// new string for the queue and the name, and a copy of the payload and
	// of the metadata each were an allocation: the
	// arguments are one slice for the claim, pointed at each row's fields
	// in turn; started_at goes into a block of the claim's; a queue or
	// name the same as the row before's shares its string (a claim reads
	// one queue, and its rows' names repeat).
	started := timeBlock{block: make([]time.Time, 0, n)}
	var queue, name lastString
	// Payloads and metadata are copied into shared chunks (rawChunks).
	var payload, metadata rawChunks
	dest := make([]any, 14)
	for rows.Next() {
		items = append(items, TaskClaimRow{})
		i := &items[len(items)-1]
		started.p, queue.p, name.p, payload.p, metadata.p = &i.StartedAt, &i.Queue, &i.Name, &i.Payload, &i.Metadata
		dest[0], dest[1], dest[2], dest[3], dest[4] = &i.ID, &queue, &name, &payload, &metadata
		dest[5], dest[6], dest[7], dest[8] = &i.Priority, &i.Attempt, &i.MaxAttempts, &i.TimeoutMs
		dest[9], dest[10], dest[11], dest[12], dest[13] = &i.RunAt, &i.CreatedAt, &started, &i.LimitLocks, &i.ExclusiveKey
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}

// timeBlock scans a nullable timestamptz into *p as rows.Scan does into a
// **time.Time, the time.Time taken from block rather than allocated.
type timeBlock struct {
	p     **time.Time
	block []time.Time
}

func (b *timeBlock) ScanTimestamptz(v pgtype.Timestamptz) error {
	if !v.Valid {
		*b.p = nil
		return nil
	}
	if v.InfinityModifier != pgtype.Finite {
		return errors.New("cannot scan an infinite timestamptz into *time.Time")
	}
	b.block = append(b.block, v.Time)
	*b.p = &b.block[len(b.block)-1]
	return nil
}

// lastString scans a text column into *p, sharing the string of the row
// before when it is the same.
type lastString struct {
	p    *string
	last string
}

func (l *lastString) ScanBytes(v []byte) error {
	if v == nil {
		return errors.New("cannot scan NULL into *string")
	}
	if string(v) != l.last {
		l.last = string(v)
	}
	*l.p = l.last
	return nil
}

// rawChunk is the size of the chunks rawChunks copies jsonb values into,
// and rawChunkMax the largest value it copies into one: a value a handler
// keeps keeps at most a chunk alive with it.
const (
	rawChunk    = 4 << 10
	rawChunkMax = rawChunk / 8
)

// rawChunks scans a jsonb column into *p as its bytes (as the lock
// session's codec does, without parsing them; nil for NULL), copied into a
// chunk shared with the values of other rows: one allocation for many
// small payloads rather than one each. Each value's capacity ends where it
// does, so that an append to one never writes into the next.
type rawChunks struct {
	p     *json.RawMessage
	chunk []byte
}

func (r *rawChunks) ScanBytes(v []byte) error {
	switch n := len(v); {
	case v == nil:
		*r.p = nil
	case n > rawChunkMax:
		*r.p = append(make(json.RawMessage, 0, n), v...)
	default:
		if cap(r.chunk)-len(r.chunk) < n {
			r.chunk = make([]byte, 0, rawChunk)
		}
		start := len(r.chunk)
		r.chunk = append(r.chunk, v...)
		*r.p = r.chunk[start:len(r.chunk):len(r.chunk)]
	}
	return nil
}

// sqlc's rows of the two claims have the same fields as TaskClaimRow.
var (
	_ = TaskClaimRow(TaskClaimPlainRow{})
	_ = TaskClaimRow(TaskClaimHeldRow{})
)
