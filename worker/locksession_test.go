package worker

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/queue"
)

// The lock session's jsonb codec copies what PostgreSQL sends into a
// json.RawMessage, and still decodes into anything else.
func TestUnmarshalRaw(t *testing.T) {
	src := []byte(`{"a": [1, 2]}`)
	var raw json.RawMessage
	if err := unmarshalRaw(src, &raw); err != nil || string(raw) != `{"a": [1, 2]}` {
		t.Fatalf("raw = %s, %v", raw, err)
	}
	src[2] = 'b'
	if string(raw) != `{"a": [1, 2]}` {
		t.Fatalf("raw shares the source's memory: %s", raw)
	}
	var m map[string][]int
	if err := unmarshalRaw([]byte(`{"a": [1, 2]}`), &m); err != nil || len(m["a"]) != 2 {
		t.Fatalf("m = %v, %v", m, err)
	}
}

// A held claim whose unlocks release the last limit block the session
// holds runs as a queue claim: with no block it could only take nothing,
// and the worker would stop trying held claims for a while (under a limit
// far above what runs, the last task of a block often ends just before
// the next claim, which carries its unlock).
func TestHeldClaimWithoutBlock(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := b.client.Enqueue(ctx, "job", nil); err != nil {
			t.Fatal(err)
		}
	}
	var limitClass int32
	if err := b.pool.QueryRow(ctx, "SELECT 'skiplock_limits'::regclass::oid::integer").Scan(&limitClass); err != nil {
		t.Fatal(err)
	}
	ls := newLockSession(b.pool.Config().ConnConfig, int32(uint32(b.schema.TableOID)), b.schema.TableOID, Config{}.sessionTuning(), b.log)
	if err := ls.connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer ls.close()
	p := db.TaskClaimParams{
		WorkerID: "w", Queue: queue.DefaultQueue, OnlyNames: []string{}, SkipNames: []string{}, OnlyIds: []int64{},
		Max: 1, CheckFull: true, ExclusiveSeed: b.schema.TableOID, LimitClass: limitClass,
	}
	rows, gen, ran, err := ls.claim(p, howQueue)
	if err != nil || len(rows) != 1 || len(rows[0].LimitLocks) != 1 || ran != howQueue {
		t.Fatalf("queue claim: %d rows (%+v), ran %d, %v; want one task with one block", len(rows), rows, ran, err)
	}
	// The task ends: its unlock, the block's with it, waits for the next
	// claim (or goes on its own if that is late: the block is gone either
	// way).
	ls.release([]int64{rows[0].ID}, rows[0].LimitLocks, gen, false)
	p.CheckFull = false
	rows, _, ran, err = ls.claim(p, howHeld)
	if err != nil || len(rows) != 1 || ran != howQueue {
		t.Fatalf("held claim after the block went: %d rows, ran %d, %v; want the other task, by a queue claim (%d)", len(rows), ran, err, howQueue)
	}
	if len(rows[0].LimitLocks) != 1 {
		t.Fatalf("the task took no place: limit locks %v", rows[0].LimitLocks)
	}
}
