package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/queue"
)

// TestCarryRunsTheSessionsClaim: a claim that carries an outcome and
// starts its rows early runs the very statement the lock session's other
// claims run, prepared once on the session and planned once: prepared
// again under a name of its own, the claim was planned again at the
// session's first carry, which its places waited for.
func TestCarryRunsTheSessionsClaim(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	var fellBack []finish
	d := b.deps(t, "w1", ModeAdvisory, nil, nil)
	g := newGuard(d).(*advisoryGuard)
	g.handoffs = &handoffs{wait: time.Hour, busy: func() bool { return false }, fallback: func(f []finish) { fellBack = append(fellBack, f...) }}
	if err := g.open(ctx, b.schema.TableOID, &outage{log: b.log, what: "test"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.close)
	for range 3 {
		if _, err := b.client.Enqueue(ctx, "job", nil, queue.WithExclusiveKey("k")); err != nil {
			t.Fatal(err)
		}
	}
	params := db.TaskClaimParams{
		WorkerID: "w1", Queue: queue.DefaultQueue, OnlyNames: []string{}, SkipNames: []string{}, Max: 8,
		ExclusiveSeed: b.schema.TableOID,
	}
	rows, gen, _, err := g.claim(params, howPlain, nil)
	if err != nil || len(rows) != 1 {
		t.Fatalf("the first claim took %d tasks (%v), want the key's first", len(rows), err)
	}
	for carry := range 2 {
		r := rows[0]
		g.handoffs.offer(finish{id: r.ID, attempt: int(r.Attempt), claimed: derefTime(r.StartedAt), gen: gen,
			gated: true, exclusiveKey: "k", queue: r.Queue, status: queue.StatusCompleted, delayMs: -1})
		started := make(chan []db.TaskClaimRow, 1)
		start := func(rows []db.TaskClaimRow, _ uint64, _ claimHow, _ <-chan struct{}) { started <- rows }
		rows, gen, _, err = g.claim(params, howPlain, start)
		if err != nil || len(rows) != 1 {
			t.Fatalf("carry %d took %d tasks (%v), want the key's next", carry+1, len(rows), err)
		}
		if early := waitFor(t, started, "the carried claim's rows"); len(early) != 1 || early[0].ID != rows[0].ID {
			t.Fatalf("carry %d started %v early, want task %d", carry+1, early, rows[0].ID)
		}
		if s := b.status(t, r.ID); s != "completed" {
			t.Fatalf("carry %d left the task it carried %s", carry+1, s)
		}
	}
	if len(fellBack) > 0 {
		t.Fatalf("%d outcomes went to the completer, want every one carried", len(fellBack))
	}
	err = g.ls.do(func(ctx context.Context, conn *pgx.Conn, _ uint64) error {
		var n, generic, custom int64
		if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
			FROM pg_prepared_statements WHERE statement LIKE '-- name: TaskClaimPlain %'`).Scan(&n, &generic, &custom); err != nil {
			return err
		}
		if n != 1 || generic != 3 || custom != 0 {
			t.Errorf("the session holds %d prepared plain claims, run on %d generic and %d custom plans; want one, run 3 times on its one generic plan",
				n, generic, custom)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
