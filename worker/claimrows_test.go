package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/queue"
)

// TaskClaimPlainRows, which the worker claims with, reads TaskClaimPlain's
// statement into TaskClaimRow by hand: it must read every column as sqlc's
// own method does. Both claim the same backlog in one transaction, one
// after the other, rolled back in between (the same now(), the same rows),
// and must return the same rows, field for field, with every field set on
// some row.
func TestTaskClaimPlainRows(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	opts := [][]queue.Option{
		{},
		{queue.WithPriority(-3), queue.WithMetadata(json.RawMessage(`{"trace":"abc"}`))},
		{queue.WithTimeout(1500 * time.Millisecond), queue.WithMaxAttempts(7)},
		{queue.WithExclusiveKey("account-9")},
		{queue.WithPriority(4), queue.WithTimeout(time.Minute), queue.WithRunAt(time.Now().Add(-time.Hour))},
	}
	for i, o := range opts {
		// Names change from row to row, and repeat.
		name := []string{"job", "job", "other", "job", "other"}[i]
		s := fmt.Sprint("payload ", i)
		if i == 2 {
			s = strings.Repeat("large ", 1000) // not copied into a shared chunk
		}
		if _, err := b.client.Enqueue(ctx, name, map[string]any{"n": i, "s": s}, o...); err != nil {
			t.Fatal(err)
		}
	}
	_, p := openClaimSession(t, b)
	params := db.TaskClaimPlainParams{
		WorkerID: p.WorkerID, LeaseMs: 60000, LockClass: p.LockClass, LimitClass: p.LimitClass,
		Queue: p.Queue, OnlyNames: p.OnlyNames, SkipNames: p.SkipNames, Max: 10, ExclusiveSeed: p.ExclusiveSeed,
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SAVEPOINT before_claim"); err != nil {
		t.Fatal(err)
	}
	generated, err := b.queries.TaskClaimPlain(ctx, tx, params)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT before_claim"); err != nil {
		t.Fatal(err)
	}
	byHand, err := b.queries.TaskClaimPlainRows(ctx, tx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(generated) != len(opts) || len(byHand) != len(generated) {
		t.Fatalf("claimed %d by sqlc's method and %d by hand, want %d each", len(generated), len(byHand), len(opts))
	}
	for i, g := range generated {
		if want := db.TaskClaimRow(g); !reflect.DeepEqual(byHand[i], want) {
			t.Errorf("row %d:\n by hand %+v\n want    %+v", i, byHand[i], want)
		}
	}
	// An append to a row's payload or metadata leaves the next row's alone.
	for i, r := range byHand {
		if cap(r.Payload) != len(r.Payload) || cap(r.Metadata) != len(r.Metadata) {
			t.Errorf("row %d: payload of length %d, capacity %d; metadata %d, %d", i, len(r.Payload), cap(r.Payload), len(r.Metadata), cap(r.Metadata))
		}
	}
	// Every field was read on some row: a column scanned into the wrong
	// field, or not at all, shows here. The plain claim takes no limit
	// slots: its limit_locks is always NULL.
	seen := reflect.New(reflect.TypeFor[db.TaskClaimRow]()).Elem()
	for _, r := range byHand {
		v := reflect.ValueOf(r)
		for f := range v.NumField() {
			if !v.Field(f).IsZero() {
				seen.Field(f).Set(v.Field(f))
			}
		}
	}
	for f := range seen.NumField() {
		if name := seen.Type().Field(f).Name; name != "LimitLocks" && seen.Field(f).IsZero() {
			t.Errorf("no row has %s set", name)
		}
	}

	// The outcome write: TaskCompleteManyIDs, through customPlans (its
	// arrays written out as text by execArgs), completes what sqlc's
	// method, through pgx's own encoding, does. One id is not claimed and
	// one attempt is wrong: both are fenced off.
	cp := db.TaskCompleteManyParams{WorkerID: params.WorkerID}
	for i, r := range byHand {
		attempt := r.Attempt
		if i == 1 {
			attempt++
		}
		cp.Ids, cp.Attempts, cp.ClaimedUs = append(cp.Ids, r.ID), append(cp.Attempts, attempt), append(cp.ClaimedUs, r.StartedAt.UnixMicro())
	}
	cp.Ids, cp.Attempts, cp.ClaimedUs = append(cp.Ids, -7), append(cp.Attempts, 1), append(cp.ClaimedUs, 0)
	if _, err := tx.Exec(ctx, "SAVEPOINT before_complete"); err != nil {
		t.Fatal(err)
	}
	want, err := b.queries.TaskCompleteMany(ctx, tx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT before_complete"); err != nil {
		t.Fatal(err)
	}
	got, err := b.queries.TaskCompleteManyIDs(ctx, customPlans{tx}, cp)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) != len(byHand)-1 || !slices.Equal(got, want) {
		t.Errorf("completed %v by hand, %v by sqlc's method; want %d ids", got, want, len(byHand)-1)
	}
}

// execArgs writes integer arrays as pgx writes them for
// pgx.QueryExecModeExec: text, of no stated type.
func TestExecArgsWriteArraysAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	for _, v := range []any{
		[]int64{}, []int64{1}, []int64{0, -1, 42, math.MaxInt64, math.MinInt64},
		[]int32{}, []int32{7, -3, math.MaxInt32, math.MinInt32},
	} {
		want, err := m.Encode(0, pgtype.TextFormatCode, v, nil)
		if err != nil {
			t.Fatal(err)
		}
		args := execArgs([]any{v})
		if len(args) != 2 || args[0] != pgx.QueryExecModeExec {
			t.Fatalf("execArgs(%v) = %v", v, args)
		}
		if got, ok := args[1].(string); !ok || got != string(want) {
			t.Errorf("%T %v: %#v, want %q as pgx writes it", v, v, args[1], want)
		}
	}
	// A nil slice stays nil (pgx sends NULL), and other types as they are.
	var none []int64
	args := execArgs([]any{none, "x", []string{"a"}, int64(5)})
	if v, ok := args[1].([]int64); !ok || v != nil {
		t.Errorf("a nil []int64 became %#v", args[1])
	}
	if args[2] != "x" || !reflect.DeepEqual(args[3], []string{"a"}) || args[4] != int64(5) {
		t.Errorf("other arguments changed: %#v", args[2:])
	}
}
