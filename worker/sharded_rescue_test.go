package worker

import (
	"context"
	"io"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// TestRescueSweepSharded: on a stamped database a sweep covers the shard's
// ids, from the start of its range, with spans sized by the ids that
// exist, not by shard<<48.
func TestRescueSweepSharded(t *testing.T) {
	base := int64(5) << 48
	var s rescueSweep
	top := func() (int64, error) { return base + 99_999, nil }
	none := func() time.Duration { return 0 }
	if !s.passed(0, math.MaxInt64, time.Second, top, none) {
		t.Fatal("a pass of 1 s began no sweep")
	}
	if from, to := s.next(); from != base || to != base+10_000 {
		t.Fatalf("the first span is [%d, %d), want [%d, %d)", from, to, base, base+10_000)
	}
	next := base
	for i := 0; i < 100; i++ {
		from, to := s.next()
		if from != next {
			t.Fatalf("span %d starts at %d, want %d", i, from, next)
		}
		next = to
		s.passed(from, to, 100*time.Millisecond, top, none)
		if s.from == base {
			break // the sweep ended and, costly, another began
		}
	}
	if next != base+100_000 || s.from != base || s.to != base+100_000 {
		t.Fatalf("the sweep ended at %d and the next is [%d, %d): want the end at %d and a new sweep from %d",
			next, s.from, s.to, base+100_000, base)
	}
}

// TestRescueOnShardedDatabase: on a database stamped as shard 5, task
// locks (keyed by the id's low 32 bits) guard running tasks, and the
// rescuer returns the orphans, in one pass and span by span.
func TestRescueOnShardedDatabase(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	if err := migrations.SetShard(ctx, b.pool, 5); err != nil {
		t.Fatal(err)
	}
	work, _ := schema.Channels(b.schema.Name)
	r := &rescuer{
		queries: b.queries, pool: b.pool, classOID: b.schema.TableOID, channel: work,
		beforeRescue: func(context.Context) {}, observer: NopObserver{}, mode: ModeAdvisory,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	g := newGuard(b.deps(t, "w-gone", ModeAdvisory, nil, nil))
	if err := g.open(ctx, b.schema.TableOID, &outage{log: b.log, what: "test"}); err != nil {
		t.Fatal(err)
	}
	rows := b.claim(t, g, "w-gone", 3)
	ids := []int64{rows[0].ID, rows[1].ID, rows[2].ID}
	slices.Sort(ids)
	for _, id := range ids {
		if queue.ShardOf(id) != 5 {
			t.Fatalf("task %d is of shard %d, want 5", id, queue.ShardOf(id))
		}
	}
	// Held locks match their tasks: nothing is orphaned.
	if n := r.rescue(ctx); n != 0 {
		t.Fatalf("a pass while the worker holds its locks rescued %d", n)
	}
	g.close()
	b.waitTaskLocksGone(t)
	// Span by span, as a sweep goes: from the start of the shard's range.
	low := sweepStart(ids[2])
	if low != 5<<48 {
		t.Fatalf("sweepStart(%d) = %d, want %d", ids[2], low, int64(5<<48))
	}
	if n := r.rescueRange(ctx, 0, low); n != 0 {
		t.Fatalf("the pass below the shard's range rescued %d", n)
	}
	if n := r.rescueRange(ctx, low, ids[1]); n != 1 {
		t.Fatalf("the pass over [%d, %d) rescued %d, want 1", low, ids[1], n)
	}
	if n := r.rescue(ctx); n != 2 {
		t.Fatalf("the pass over every id rescued %d, want the other 2", n)
	}
	for _, id := range ids {
		if s := b.status(t, id); s != "pending" {
			t.Fatalf("task %d is %s after the rescue, want pending", id, s)
		}
	}
}
