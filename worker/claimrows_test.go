package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

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
		if _, err := b.client.Enqueue(ctx, "job", map[string]any{"n": i, "s": fmt.Sprint("payload ", i)}, o...); err != nil {
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
}
