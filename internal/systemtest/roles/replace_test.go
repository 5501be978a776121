package roles

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// TestReplaceKeyRoles: replacing a pending task changes it, which a
// producer may not do: with its grants alone WithReplaceKey and
// skiplock_enqueue_replace are one readable permission error that changes
// nothing; with UPDATE on the columns a replacement writes (the grant
// docs/OPERATIONS.md gives) they work, and so they do for a worker.
func TestReplaceKeyRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.client.Enqueue(ctx, "sync", 1, queue.WithReplaceKey("k")); err != nil {
		t.Fatal(err)
	}
	before := b.snapshot(t)

	role, pool := b.as(t, migrations.Producer)
	c := queue.New(pool)
	_, err := c.Enqueue(ctx, "sync", 2, queue.WithDebounce("k", time.Second))
	wantDenied(t, "producer: WithDebounce", err)
	_, err = c.Enqueue(ctx, "sync", 2, queue.WithReplaceKey("new"))
	wantDenied(t, "producer: WithReplaceKey of a new key", err)
	_, err = pgerr.Interpreting(pool).Exec(ctx, "SELECT * FROM skiplock_enqueue_replace('sync', '2', replace_key => 'k')")
	wantDenied(t, "producer: skiplock_enqueue_replace", err)
	if after := b.snapshot(t); after != before {
		t.Fatalf("refused replacements changed the tables:\nbefore %s\nafter  %s", before, after)
	}

	grant := "GRANT UPDATE (queue, name, payload, metadata, priority, run_at, max_attempts, timeout_ms, exclusive_key, limit_key) " +
		"ON skiplock_tasks TO " + pgx.Identifier{role}.Sanitize()
	if _, err := b.admin.Exec(ctx, grant); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Enqueue(ctx, "sync", 3, queue.WithDebounce("k", time.Second)); err != nil || !res.Replaced {
		t.Fatalf("producer with the grant: %+v, %v", res, err)
	}
	var replaced bool
	if err := pool.QueryRow(ctx, "SELECT replaced FROM skiplock_enqueue_replace('sync', '4', replace_key => 'k')").Scan(&replaced); err != nil || !replaced {
		t.Fatalf("producer with the grant, from SQL: replaced %v, %v", replaced, err)
	}

	_, wpool := b.as(t, migrations.Worker)
	if res, err := queue.New(wpool).Enqueue(ctx, "sync", 5, queue.WithReplaceKey("k")); err != nil || !res.Replaced {
		t.Fatalf("worker: %+v, %v", res, err)
	}
	if got := b.count(t, "replace_key = 'k'"); got != 1 {
		t.Fatalf("%d tasks of key k, want 1", got)
	}
}
