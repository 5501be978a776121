package migrations_test

import (
	"context"
	"errors"
	"testing"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

func TestSetShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if n, err := migrations.Shard(ctx, pool); err != nil || n != 0 {
		t.Fatalf("Shard of a fresh database: %d, %v; want 0", n, err)
	}
	for _, bad := range []int{0, -1, queue.MaxShard + 1} {
		if err := migrations.SetShard(ctx, pool, bad); !errors.Is(err, migrations.ErrShardStamp) {
			t.Errorf("SetShard(%d): %v, want ErrShardStamp", bad, err)
		}
	}
	// A database whose sequence moved on (tasks enqueued and purged)
	// moves forward to its shard's range.
	if _, err := pool.Exec(ctx, `SELECT setval(pg_get_serial_sequence('skiplock_tasks', 'id'), 5000)`); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := migrations.SetShard(ctx, pool, 7); err != nil {
			t.Fatalf("SetShard(7): %v", err)
		}
	}
	if n, err := migrations.Shard(ctx, pool); err != nil || n != 7 {
		t.Fatalf("Shard: %d, %v; want 7", n, err)
	}
	c := queue.New(pool)
	first, err := c.Enqueue(ctx, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if queue.ShardOf(first.ID) != 7 || first.ID != 7<<48+1 {
		t.Fatalf("first id %d (shard %d), want %d", first.ID, queue.ShardOf(first.ID), int64(7<<48+1))
	}
	// Stamping again does not move the sequence back.
	if err := migrations.SetShard(ctx, pool, 7); err != nil {
		t.Fatal(err)
	}
	second, err := c.Enqueue(ctx, "a", nil)
	if err != nil || second.ID != first.ID+1 {
		t.Fatalf("after a second SetShard: id %d, %v; want %d", second.ID, err, first.ID+1)
	}
	wf, err := c.EnqueueWorkflow(ctx, queue.Workflow{Steps: []queue.Step{{Name: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.EnqueueBatch(ctx, queue.Batch{Tasks: []queue.NewTask{{Name: "m"}}})
	if err != nil {
		t.Fatal(err)
	}
	for what, id := range map[string]int64{"workflow": wf.ID, "workflow task": wf.TaskIDs["x"], "batch": b.ID, "batch task": b.TaskIDs[0]} {
		if queue.ShardOf(id) != 7 {
			t.Errorf("%s id %d is of shard %d, want 7", what, id, queue.ShardOf(id))
		}
	}
	// Another shard is refused, and nothing changes.
	err = migrations.SetShard(ctx, pool, 8)
	if !errors.Is(err, migrations.ErrShardStamp) {
		t.Fatalf("SetShard(8) on shard 7: %v, want ErrShardStamp", err)
	}
	t.Logf("refusal: %v", err)
	if n, _ := migrations.Shard(ctx, pool); n != 7 {
		t.Fatalf("after a refused SetShard(8): shard %d", n)
	}
}

func TestSetShardRefusesExistingIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := queue.New(pool).Enqueue(ctx, "old", nil); err != nil {
		t.Fatal(err)
	}
	err := migrations.SetShard(ctx, pool, 3)
	if !errors.Is(err, migrations.ErrShardStamp) {
		t.Fatalf("SetShard on a database with tasks below the range: %v, want ErrShardStamp", err)
	}
	t.Logf("refusal: %v", err)
	if n, _ := migrations.Shard(ctx, pool); n != 0 {
		t.Fatalf("refused SetShard stamped shard %d", n)
	}
}
