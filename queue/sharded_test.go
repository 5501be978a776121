package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// shardPools returns a migrated schema of the test server for each shard
// number, stamped with it (0 stays unstamped): shards in one server, for
// routing.
func shardPools(t *testing.T, shards ...int) map[int]*pgxpool.Pool {
	t.Helper()
	out := map[int]*pgxpool.Pool{}
	for _, n := range shards {
		pool := pgtest.Pool(t)
		if n != 0 {
			if err := migrations.SetShard(context.Background(), pool, n); err != nil {
				t.Fatal(err)
			}
		}
		out[n] = pool
	}
	return out
}

func newSharded(t *testing.T, pools map[int]*pgxpool.Pool) *queue.ShardedClient {
	t.Helper()
	c, err := queue.NewSharded(pools)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestShardedRouting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := shardPools(t, 1, 2, 3)
	c := newSharded(t, pools)

	// Without a key: every shard in turn, each ID carrying its shard.
	perShard := map[int]int{}
	for i := range 30 {
		id, err := c.Enqueue(ctx, "plain", i)
		if err != nil {
			t.Fatal(err)
		}
		n := queue.ShardOf(id)
		perShard[n]++
		task, err := c.Get(ctx, id)
		if err != nil || task.ID != id {
			t.Fatalf("Get(%d): %v, %v", id, task, err)
		}
		var found int
		if err := pools[n].QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks WHERE id = $1`, id).Scan(&found); err != nil || found != 1 {
			t.Fatalf("task %d is not in shard %d's database (%d, %v)", id, n, found, err)
		}
	}
	if perShard[1] != 10 || perShard[2] != 10 || perShard[3] != 10 {
		t.Fatalf("30 tasks without a key went %v, want 10 to each shard", perShard)
	}

	// A sequence key: one shard, in order.
	key := "account:17"
	var seq []int64
	for i := range 5 {
		id, err := c.Enqueue(ctx, "step", i, queue.WithSequence(key))
		if err != nil {
			t.Fatal(err)
		}
		if queue.ShardOf(id) != c.ShardFor(key) {
			t.Fatalf("sequence task %d on shard %d, want %d", id, queue.ShardOf(id), c.ShardFor(key))
		}
		seq = append(seq, id)
	}
	sc, _ := c.Shard(c.ShardFor(key))
	info, err := sc.GetSequence(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Tasks) != 5 || info.Head != seq[0] {
		t.Fatalf("sequence on shard %d: %d tasks, head %d; want 5, head %d", c.ShardFor(key), len(info.Tasks), info.Head, seq[0])
	}
	for i, task := range info.Tasks {
		if task.ID != seq[i] {
			t.Fatalf("sequence order: task %d is %d, want %d", i, task.ID, seq[i])
		}
	}

	// A unique key: the same shard every time, so it stays unique.
	first, err := c.Enqueue(ctx, "once", nil, queue.WithUniqueKey("report:2026-11"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Enqueue(ctx, "once", nil, queue.WithUniqueKey("report:2026-11"))
	var dup *queue.DuplicateError
	if !errors.As(err, &dup) || again != first || dup.ExistingID != first {
		t.Fatalf("second enqueue of a unique key: %d, %v; want a duplicate of %d", again, err, first)
	}
	// WithUnique derives its key from the payload: alike payloads meet.
	u1, err := c.Enqueue(ctx, "derived", map[string]int{"a": 1}, queue.WithUnique())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "derived", map[string]int{"a": 1}, queue.WithUnique()); !errors.Is(err, queue.ErrDuplicate) {
		t.Fatalf("second WithUnique enqueue: %v, want ErrDuplicate (first %d)", err, u1)
	}

	// Keys spread over every shard, and a shard key wins over the others.
	hit := map[int]bool{}
	for i := range 200 {
		k := fmt.Sprintf("tenant:%d", i)
		id, err := c.Enqueue(ctx, "keyed", nil, queue.WithExclusiveKey(k))
		if err != nil {
			t.Fatal(err)
		}
		if queue.ShardOf(id) != c.ShardFor(k) {
			t.Fatalf("exclusive key %q went to shard %d, want %d", k, queue.ShardOf(id), c.ShardFor(k))
		}
		hit[queue.ShardOf(id)] = true
		id, err = c.Enqueue(ctx, "keyed", nil, queue.WithLimitKey(k), queue.WithShardKey("pinned"))
		if err != nil {
			t.Fatal(err)
		}
		if queue.ShardOf(id) != c.ShardFor("pinned") {
			t.Fatalf("WithShardKey(pinned) went to shard %d, want %d", queue.ShardOf(id), c.ShardFor("pinned"))
		}
	}
	if len(hit) != 3 {
		t.Fatalf("200 keys reached shards %v, want all three", hit)
	}
}

// TestShardForAddingShard: a shard added with the highest number takes
// keys from the others, and no key moves between the others.
func TestShardForAddingShard(t *testing.T) {
	t.Parallel()
	pools := shardPools(t, 1, 2, 3, 4)
	three := newSharded(t, map[int]*pgxpool.Pool{1: pools[1], 2: pools[2], 3: pools[3]})
	four := newSharded(t, pools)
	moved := 0
	for i := range 10_000 {
		k := fmt.Sprintf("key-%d", i)
		a, b := three.ShardFor(k), four.ShardFor(k)
		if a != b {
			moved++
			if b != 4 {
				t.Fatalf("key %q moved from shard %d to %d, not to the new shard", k, a, b)
			}
		}
	}
	if moved < 1500 || moved > 3500 {
		t.Fatalf("%d of 10000 keys moved to the fourth shard, want about a quarter", moved)
	}
}

func TestShardedByID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := shardPools(t, 0, 2)
	c := newSharded(t, pools)
	var ids []int64
	for i := range 4 {
		id, err := c.Enqueue(ctx, "t", i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if queue.ShardOf(ids[0]) == queue.ShardOf(ids[1]) {
		t.Fatalf("ids %v: two tasks in turn went to one shard", ids)
	}

	// An ID of a shard the client lacks: a clear error, nothing changed.
	foreign := int64(9)<<48 | 1
	_, err := c.Get(ctx, foreign)
	if !errors.Is(err, queue.ErrUnknownShard) || !strings.Contains(err.Error(), "shard 9") {
		t.Fatalf("Get of shard 9's task: %v, want ErrUnknownShard naming shard 9", err)
	}
	t.Logf("unknown shard: %v", err)
	res, err := c.Cancel(ctx, queue.CancelRequest{IDs: append([]int64{foreign}, ids...)})
	if !errors.Is(err, queue.ErrUnknownShard) || res.Changed != 0 {
		t.Fatalf("Cancel naming shard 9's task: %+v, %v; want ErrUnknownShard and nothing cancelled", res, err)
	}
	for _, id := range ids {
		if task, err := c.Get(ctx, id); err != nil || task.Status != queue.StatusPending {
			t.Fatalf("task %d after a refused Cancel: %v, %v", id, task, err)
		}
	}

	// Cancel and Requeue by ID reach every shard named.
	res, err = c.Cancel(ctx, queue.CancelRequest{IDs: ids})
	if err != nil || res.Changed != 4 || len(res.IDs) != 4 {
		t.Fatalf("Cancel over two shards: %+v, %v", res, err)
	}
	rq, err := c.Requeue(ctx, queue.RequeueRequest{IDs: append(ids, ids[0]+1000), Filter: queue.Filter{Statuses: []queue.Status{queue.StatusCancelled}}})
	if err != nil || rq.Changed != 4 || len(rq.Skipped) != 1 || rq.Skipped[0].ID != ids[0]+1000 {
		t.Fatalf("Requeue over two shards: %+v, %v", rq, err)
	}
	for _, id := range ids {
		if task, err := c.Get(ctx, id); err != nil || task.Status != queue.StatusPending {
			t.Fatalf("task %d after Requeue: %v, %v", id, task, err)
		}
	}
	// By filter: every shard.
	res, err = c.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{Names: []string{"t"}}})
	if err != nil || res.Changed != 4 {
		t.Fatalf("Cancel by filter over two shards: %+v, %v", res, err)
	}
	// The other bulk changes, by ID and by filter, reach every shard.
	res, err = c.RunNow(ctx, ids)
	if err != nil || res.Changed != 0 || len(res.Skipped) != 4 {
		t.Fatalf("RunNow of cancelled tasks over two shards: %+v, %v; want 4 skipped", res, err)
	}
	res, err = c.Delete(ctx, ids[:2])
	if err != nil || res.Changed != 2 || !slices.Equal(res.IDs, slices.Sorted(slices.Values(ids[:2]))) {
		t.Fatalf("Delete over two shards: %+v, %v", res, err)
	}
	res, err = c.Purge(ctx, queue.PurgeRequest{Filter: queue.Filter{FinishedBefore: time.Now().Add(time.Hour)}})
	if err != nil || res.Changed != 2 {
		t.Fatalf("Purge over two shards: %+v, %v; want the 2 tasks left", res, err)
	}
}

func TestShardedStampMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := shardPools(t, 0, 2)
	for _, c := range []struct {
		pools map[int]*pgxpool.Pool
		want  string
	}{
		{map[int]*pgxpool.Pool{3: pools[2]}, "stamped as shard 2"},
		{map[int]*pgxpool.Pool{1: pools[0]}, "not stamped"},
		{map[int]*pgxpool.Pool{0: pools[2]}, "stamped as shard 2"},
	} {
		sc := newSharded(t, c.pools)
		_, err := sc.Enqueue(ctx, "t", nil)
		if !errors.Is(err, queue.ErrShardMismatch) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("mismatched shard: %v, want ErrShardMismatch saying %q", err, c.want)
		}
	}
	var n int
	for _, pool := range pools {
		var k int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks`).Scan(&k); err != nil {
			t.Fatal(err)
		}
		n += k
	}
	if n != 0 {
		t.Fatalf("%d tasks inserted through mismatched shards", n)
	}
	if _, err := queue.NewSharded(map[int]*pgxpool.Pool{queue.MaxShard + 1: pools[0]}); err == nil {
		t.Fatal("NewSharded took a shard number past MaxShard")
	}
	if _, err := queue.NewSharded(nil); err == nil {
		t.Fatal("NewSharded took no shards")
	}
}

func TestShardedDependenciesAndGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := shardPools(t, 1, 2)
	c := newSharded(t, pools)
	a, err := c.Enqueue(ctx, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Enqueue(ctx, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	if queue.ShardOf(a) == queue.ShardOf(b) {
		t.Fatalf("a %d and b %d on one shard", a, b)
	}
	dep, err := c.Enqueue(ctx, "after-a", nil, queue.WithDependsOn(a))
	if err != nil || queue.ShardOf(dep) != queue.ShardOf(a) {
		t.Fatalf("a task depending on %d: %d, %v; want it on shard %d", a, dep, err, queue.ShardOf(a))
	}
	_, err = c.Enqueue(ctx, "after-both", nil, queue.WithDependsOn(a, b))
	if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), "one shard") {
		t.Fatalf("a task depending on two shards: %v, want ErrInvalidTask saying one shard", err)
	}
	t.Logf("cross-shard dependency: %v", err)
	// A key that routes elsewhere than the dependency.
	var other string
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("k%d", i); c.ShardFor(k) != queue.ShardOf(a) {
			other = k
		}
	}
	if _, err := c.Enqueue(ctx, "x", nil, queue.WithDependsOn(a), queue.WithShardKey(other)); !errors.Is(err, queue.ErrInvalidTask) {
		t.Fatalf("dependency and key on two shards: %v, want ErrInvalidTask", err)
	}

	// EnqueueTx on a transaction of one shard.
	n := queue.ShardOf(b)
	tx, err := pools[n].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.EnqueueTx(ctx, n, tx, "in-tx", nil)
	if err != nil || queue.ShardOf(id) != n {
		t.Fatalf("EnqueueTx on shard %d: %d, %v", n, id, err)
	}
	if _, err := c.EnqueueTx(ctx, n, tx, "in-tx", nil, queue.WithDependsOn(a)); !errors.Is(err, queue.ErrInvalidTask) {
		t.Fatalf("EnqueueTx on shard %d of a task depending on shard %d: %v", n, queue.ShardOf(a), err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, id); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("a task of a rolled-back EnqueueTx: %v, want ErrNotFound", err)
	}
	if _, err := c.EnqueueTx(ctx, 7, tx, "in-tx", nil); !errors.Is(err, queue.ErrUnknownShard) {
		t.Fatalf("EnqueueTx on shard 7: %v, want ErrUnknownShard", err)
	}

	// A workflow and a batch live on the shard of their key.
	wf, err := c.EnqueueWorkflow(ctx, queue.Workflow{
		Options: []queue.Option{queue.WithShardKey("wf-key")},
		Steps:   []queue.Step{{Name: "fetch"}, {Name: "store", DependsOn: []string{"fetch"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := c.ShardFor("wf-key")
	for _, id := range []int64{wf.ID, wf.Tasks["fetch"], wf.Tasks["store"]} {
		if queue.ShardOf(id) != want {
			t.Fatalf("workflow id %d on shard %d, want %d", id, queue.ShardOf(id), want)
		}
	}
	if info, err := c.GetWorkflow(ctx, wf.ID); err != nil || len(info.Tasks) != 2 {
		t.Fatalf("GetWorkflow(%d): %v, %v", wf.ID, info, err)
	}
	_, err = c.EnqueueWorkflow(ctx, queue.Workflow{
		Options: []queue.Option{queue.WithShardKey("wf-key")},
		Steps:   []queue.Step{{Name: "x", Options: []queue.Option{queue.WithShardKey("other")}}},
	})
	if !errors.Is(err, queue.ErrInvalidTask) {
		t.Fatalf("a step with another shard key: %v, want ErrInvalidTask", err)
	}
	bt, err := c.EnqueueBatch(ctx, queue.Batch{
		Options:  []queue.Option{queue.WithShardKey("batch-key")},
		Tasks:    []queue.NewTask{{Name: "m1"}, {Name: "m2"}},
		OnFinish: queue.NewTask{Name: "done"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want = c.ShardFor("batch-key")
	for _, id := range append([]int64{bt.ID, bt.OnFinish}, bt.Tasks...) {
		if queue.ShardOf(id) != want {
			t.Fatalf("batch id %d on shard %d, want %d", id, queue.ShardOf(id), want)
		}
	}
	if info, err := c.GetBatch(ctx, bt.ID); err != nil || info.Total != 2 {
		t.Fatalf("GetBatch(%d): %+v, %v", bt.ID, info, err)
	}
}

// TestShardedPassesOverUnreachable: a task without a key goes to a shard
// that can be reached; a task whose key routes to the unreachable shard
// fails, and goes nowhere else.
func TestShardedPassesOverUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := shardPools(t, 1)
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	down := pgtest.PoolFromConfig(t, cfg)
	c := newSharded(t, map[int]*pgxpool.Pool{1: pools[1], 2: down})
	for i := range 6 {
		id, err := c.Enqueue(ctx, "anywhere", i)
		if err != nil || queue.ShardOf(id) != 1 {
			t.Fatalf("enqueue %d with shard 2 down: %d, %v; want it on shard 1", i, id, err)
		}
	}
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); c.ShardFor(k) == 2 {
			key = k
		}
	}
	if _, err := c.Enqueue(ctx, "keyed", nil, queue.WithShardKey(key)); err == nil {
		t.Fatal("a task routed to the unreachable shard was enqueued")
	} else {
		t.Logf("routed to a shard that is down: %v", err)
	}
	var n int
	if err := pools[1].QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks`).Scan(&n); err != nil || n != 6 {
		t.Fatalf("shard 1 holds %d tasks, %v; want 6", n, err)
	}
}

// TestShardedEvenWhileOneIsDown: while one shard of three is down, the
// two others share the tasks without a key evenly: the turn of the one
// down does not all go to the one after it.
func TestShardedEvenWhileOneIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := shardPools(t, 1, 3)
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	c := newSharded(t, map[int]*pgxpool.Pool{1: pools[1], 2: pgtest.PoolFromConfig(t, cfg), 3: pools[3]})
	per := map[int]int{}
	for i := range 60 {
		id, err := c.Enqueue(ctx, "anywhere", i)
		if err != nil {
			t.Fatalf("enqueue %d with shard 2 down: %v", i, err)
		}
		per[queue.ShardOf(id)]++
	}
	if per[1] < 24 || per[3] < 24 {
		t.Fatalf("60 tasks with shard 2 down went %d to shard 1 and %d to shard 3; want about 30 each", per[1], per[3])
	}
}

type shardedInvoice struct{ Customer int }

func (shardedInvoice) TaskName() string { return "invoice" }
func (i shardedInvoice) TaskOptions() []queue.Option {
	return []queue.Option{queue.WithShardKey(fmt.Sprintf("customer:%d", i.Customer))}
}

func TestShardedEnqueueArgs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newSharded(t, shardPools(t, 1, 2, 3))
	for i := range 20 {
		id, err := c.EnqueueArgs(ctx, shardedInvoice{Customer: i})
		if err != nil {
			t.Fatal(err)
		}
		if want := c.ShardFor(fmt.Sprintf("customer:%d", i)); queue.ShardOf(id) != want {
			t.Fatalf("invoice of customer %d on shard %d, want %d", i, queue.ShardOf(id), want)
		}
		task, err := c.Get(ctx, id)
		if err != nil || task.Name != "invoice" {
			t.Fatalf("Get(%d): %v, %v", id, task, err)
		}
	}
	if _, err := c.EnqueueArgs(ctx, nil); !errors.Is(err, queue.ErrInvalidTask) {
		t.Fatalf("EnqueueArgs(nil): %v, want ErrInvalidTask", err)
	}
}
