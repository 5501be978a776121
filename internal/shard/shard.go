// Package shard holds what queue, worker and migrations share about
// sharding: the layout of a task ID that carries its shard, and the
// stamp that records which shard a database is.
//
// A shard's identity sequences (of skiplock_tasks, skiplock_workflows and
// skiplock_batches) are bounded to the shard's range of IDs, [Base(n)+1,
// Base(n)+2^48-1]: the sequence's MINVALUE is the stamp. The bounds are
// the record because they need no object of their own (no migration), go
// wherever the sequence goes (pg_dump, a restore, a replica), and make the
// database itself refuse an ID outside its shard.
//
// The SQL here is catalog reads and DDL on the sequences that the
// identity columns name (a statement that takes identifiers and bounds
// as literals), which sqlc cannot express, as migrations' own DDL.
package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/pgerr"
)

const (
	// Bits is how many low bits of an ID count within its shard.
	Bits = 48
	// Max is the highest shard number: IDs stay positive bigints.
	Max = 1<<(63-Bits) - 1
	// span is how many IDs one shard has.
	span = int64(1) << Bits
)

// Of returns the shard of an ID: its bits above Bits; 0 for an ID of a
// database that is not stamped.
func Of(id int64) int { return int(id >> Bits) }

// Base returns the lowest ID of shard n's range (exclusive of 0's ID 0).
func Base(n int) int64 { return int64(n) << Bits }

// Check validates a shard number for a map of shards: 0 to Max.
func Check(n int) error {
	if n < 0 || n > Max {
		return fmt.Errorf("shard number %d is outside 0..%d", n, Max)
	}
	return nil
}

// Tables are the tables whose identity sequence a stamp bounds, in the
// order SetShard reads and changes them.
var Tables = []string{"skiplock_tasks", "skiplock_workflows", "skiplock_batches"}

// sequenceState is one identity sequence as Stamp and Set see it.
type sequenceState struct {
	table    string
	name     string // the sequence, schema-qualified and quoted
	min, max int64
	last     int64 // the last value handed out; min-1 when none was
	lowest   int64 // the table's lowest id; 0 when empty
}

func (s sequenceState) shard() int {
	if s.min < span {
		return 0
	}
	return Of(s.min)
}

// read reads the bounds of table's identity sequence from the catalog,
// which every role may read; withState also reads where the sequence is
// and the table's lowest id, which need the owner's privileges.
func read(ctx context.Context, x pgerr.Executor, table string, withState bool) (sequenceState, error) {
	s := sequenceState{table: table}
	var name *string
	err := x.QueryRow(ctx, `SELECT pg_catalog.pg_get_serial_sequence($1, 'id')`, table).Scan(&name)
	if err != nil {
		return s, fmt.Errorf("finding the identity sequence of %s: %w", table, err)
	}
	if name == nil {
		return s, fmt.Errorf("%w (%s has no identity sequence)", pgerr.ErrNotMigrated, table)
	}
	s.name = *name
	err = x.QueryRow(ctx, `SELECT q.seqmin, q.seqmax FROM pg_catalog.pg_sequence AS q WHERE q.seqrelid = $1::regclass`,
		s.name).Scan(&s.min, &s.max)
	if err != nil {
		return s, fmt.Errorf("reading the bounds of the sequence %s: %w", s.name, err)
	}
	if !withState {
		return s, nil
	}
	var called bool
	if err := x.QueryRow(ctx, `SELECT last_value, is_called FROM `+s.name).Scan(&s.last, &called); err != nil {
		return s, fmt.Errorf("reading the sequence %s: %w", s.name, err)
	}
	if !called {
		s.last-- // the next value is last_value itself
	}
	if err := x.QueryRow(ctx, `SELECT coalesce(min(id), 0) FROM `+table).Scan(&s.lowest); err != nil {
		return s, fmt.Errorf("reading the lowest id of %s: %w", table, err)
	}
	return s, nil
}

// Stamp returns the shard that x's database (the skiplock schema of its
// search_path) is stamped with: 0 when it is not stamped. It reads the
// catalog only, so any role may call it.
func Stamp(ctx context.Context, x pgerr.Executor) (int, error) {
	s, err := read(ctx, pgerr.Interpreting(x), Tables[0], false)
	if err != nil {
		return 0, err
	}
	return s.shard(), nil
}

// ErrStamp wraps the refusals of Set: a database stamped with another
// shard, or one whose IDs would fall outside its shard's range.
var ErrStamp = errors.New("skiplock: cannot stamp the database with this shard")

// Set stamps the database of tx with shard n (1 to Max): each identity
// sequence is bounded to the shard's range and moved to its start, never
// backward. Stamped already with n, it changes nothing. It refuses a
// database stamped with another shard, and one whose tables hold IDs
// below the shard's range (they would not route to it). tx should be a
// transaction: the three sequences change together or not at all.
func Set(ctx context.Context, tx pgx.Tx, n int) error {
	if n < 1 || n > Max {
		return fmt.Errorf("%w: shard number %d is outside 1..%d (0 is a database that is not sharded)", ErrStamp, n, Max)
	}
	x := pgerr.Interpreting(tx)
	// One stamp at a time: two concurrent calls would both see the
	// sequences unstamped.
	if _, err := x.Exec(ctx, `SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('skiplock shard stamp'))`); err != nil {
		return fmt.Errorf("stamping shard %d: %w", n, err)
	}
	base, top := Base(n), Base(n)+span-1
	states := make([]sequenceState, len(Tables))
	for i, t := range Tables {
		s, err := read(ctx, x, t, true)
		if err != nil {
			return fmt.Errorf("stamping shard %d: %w", n, err)
		}
		if got := s.shard(); got != 0 && got != n {
			return fmt.Errorf("%w: the database is stamped as shard %d (sequence %s starts at %d), not %d; a database keeps its shard",
				ErrStamp, got, s.name, s.min, n)
		}
		if s.lowest != 0 && s.lowest < base {
			return fmt.Errorf("%w: %s holds ids below shard %d's range (lowest %d, the range starts at %d): they would not route to this shard; "+
				"keep this database as shard 0, or stamp a database that has no such rows", ErrStamp, t, n, s.lowest, base+1)
		}
		if s.last > top {
			return fmt.Errorf("%w: the sequence %s is past shard %d's range (last value %d)", ErrStamp, s.name, n, s.last)
		}
		states[i] = s
	}
	for _, s := range states {
		if s.min == base+1 && s.max == top {
			continue // stamped with n already
		}
		start := max(base+1, s.last+1) // never backward
		ddl := "ALTER SEQUENCE " + s.name +
			" MINVALUE " + strconv.FormatInt(base+1, 10) +
			" MAXVALUE " + strconv.FormatInt(top, 10) +
			" START WITH " + strconv.FormatInt(start, 10) +
			" RESTART WITH " + strconv.FormatInt(start, 10)
		if _, err := x.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("stamping shard %d: %s: %w", n, s.name, err)
		}
	}
	return nil
}
