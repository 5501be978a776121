package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/user"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// auditRows reads every audit record, oldest first.
func auditRows(t *testing.T, c *queue.Client) []queue.AuditEntry {
	t.Helper()
	rows, err := c.AuditLog(context.Background(), queue.AuditFilter{Limit: queue.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(rows)-1; i < j; i, j = i+1, j-1 {
		rows[i], rows[j] = rows[j], rows[i]
	}
	return rows
}

// osUser is who a change without an Actor is recorded as.
func osUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Skipf("no OS user: %v", err)
	}
	return u.Username
}

func currentRole(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var role string
	if err := pool.QueryRow(context.Background(), "SELECT current_user").Scan(&role); err != nil {
		t.Fatal(err)
	}
	return role
}

// TestAuditEveryChange makes each operator change once and finds exactly
// one record of it: its action, actor, source, how many tasks, and what was
// asked.
func TestAuditEveryChange(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	alice := queue.WithActor(context.Background(), queue.Actor{Name: "alice", Source: queue.SourceDashboard})

	failed := func(n int) []int64 {
		var ids []int64
		for range n {
			ids = append(ids, insert(t, pool, "mail", "send", queue.StatusFailed, 1, 1, failedHistory("smtp down")))
		}
		return ids
	}
	scheduled := insert(t, pool, "mail", "send", queue.StatusPending, 0, 3, `[]`)
	if _, err := pool.Exec(context.Background(), `UPDATE skiplock_tasks SET run_at = now() + interval '1 hour' WHERE id = $1`, scheduled); err != nil {
		t.Fatal(err)
	}
	running := insert(t, pool, "mail", "send", queue.StatusRunning, 1, 3, `[]`)
	old := insert(t, pool, "mail", "send", queue.StatusCompleted, 1, 3, `[]`)
	if _, err := pool.Exec(context.Background(), `UPDATE skiplock_tasks SET finished_at = now() - interval '2 days' WHERE id = $1`, old); err != nil {
		t.Fatal(err)
	}

	for _, x := range []struct {
		action   queue.AuditAction
		affected int64
		request  string // a part of the recorded request
		change   func(ctx context.Context) error
	}{
		{queue.AuditRequeue, 2, `"ids": [`, func(ctx context.Context) error {
			_, err := c.Requeue(ctx, queue.RequeueRequest{IDs: failed(2)})
			return err
		}},
		{queue.AuditRequeue, 3, `"queues": ["mail"]`, func(ctx context.Context) error {
			failed(3)
			_, err := c.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{Queues: []string{"mail"}}, BatchSize: 2})
			return err
		}},
		{queue.AuditCancel, 1, `"ids": [`, func(ctx context.Context) error {
			_, err := c.Cancel(ctx, queue.CancelRequest{IDs: failed(1)})
			return err
		}},
		{queue.AuditCancel, 2, `"filter": {`, func(ctx context.Context) error {
			failed(2)
			_, err := c.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{Statuses: []queue.Status{queue.StatusFailed}}})
			return err
		}},
		{queue.AuditCancelRunning, 1, `"ids": [`, func(ctx context.Context) error {
			_, err := c.Cancel(ctx, queue.CancelRequest{IDs: []int64{running}, Filter: queue.Filter{Statuses: []queue.Status{queue.StatusRunning}}})
			return err
		}},
		{queue.AuditCancelRunning, 1, `"statuses": ["running"]`, func(ctx context.Context) error {
			_, err := c.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{Queues: []string{"mail"}, Statuses: []queue.Status{queue.StatusRunning}}})
			return err
		}},
		// Pending and running tasks in one call: one record of both.
		{queue.AuditCancel, 2, `"statuses": ["pending", "waiting", "failed", "running"]`, func(ctx context.Context) error {
			_, err := c.Cancel(ctx, queue.CancelRequest{IDs: []int64{running, failed(1)[0]},
				Filter: queue.Filter{Statuses: []queue.Status{queue.StatusPending, queue.StatusWaiting, queue.StatusFailed, queue.StatusRunning}}})
			return err
		}},
		{queue.AuditRunNow, 1, `"ids": [`, func(ctx context.Context) error {
			_, err := c.RunNow(ctx, []int64{scheduled})
			return err
		}},
		{queue.AuditDelete, 2, `"ids": [`, func(ctx context.Context) error {
			_, err := c.Delete(ctx, failed(2))
			return err
		}},
		{queue.AuditPurge, 1, `"finished_before": "`, func(ctx context.Context) error {
			_, err := c.Purge(ctx, queue.PurgeRequest{Filter: queue.Filter{FinishedBefore: time.Now().Add(-24 * time.Hour)}})
			return err
		}},
		{queue.AuditPause, 1, `"queue": "mail"`, func(ctx context.Context) error { return c.PauseQueue(ctx, "mail") }},
		{queue.AuditResume, 1, `"queue": "mail"`, func(ctx context.Context) error { return c.ResumeQueue(ctx, "mail") }},
		{queue.AuditLimitSet, 1, `"limit": "queue mail"`, func(ctx context.Context) error {
			return c.SetLimit(ctx, queue.Limit{Queue: "mail", Max: 2})
		}},
		{queue.AuditLimitRemove, 1, `"limit": "queue mail"`, func(ctx context.Context) error {
			// Set without a record, so that each round removes one.
			if _, err := pool.Exec(ctx, `INSERT INTO skiplock_limits (kind, target, max_running) VALUES ('queue', 'mail', 2)
				ON CONFLICT (kind, target) DO NOTHING`); err != nil {
				return err
			}
			return c.RemoveLimit(ctx, queue.Limit{Queue: "mail"})
		}},
		{queue.AuditEnqueue, 1, `"names": ["report.build"]`, func(ctx context.Context) error {
			_, err := c.Enqueue(ctx, "report.build", map[string]int{"month": 11}, queue.WithQueue("reports"))
			return err
		}},
		{queue.AuditEnqueue, 3, `"queues": ["default"]`, func(ctx context.Context) error {
			_, err := c.EnqueueMany(ctx, []queue.NewTask{{Name: "a"}, {Name: "b"}, {Name: "a"}})
			return err
		}},
	} {
		before := len(auditRows(t, c))
		for _, actor := range []string{"", "alice"} {
			ctx := context.Background()
			if actor != "" {
				ctx = alice
			} else if x.action == queue.AuditEnqueue {
				continue // a producer's enqueue is not recorded
			}
			n := len(auditRows(t, c))
			if err := x.change(ctx); err != nil {
				t.Fatalf("%s: %v", x.action, err)
			}
			rows := auditRows(t, c)
			if len(rows) != n+1 {
				t.Fatalf("%s by %q: %d new audit records, want 1", x.action, actor, len(rows)-n)
			}
			r := rows[len(rows)-1]
			wantActor, wantSource := osUser(t), queue.SourceAPI
			if actor != "" {
				wantActor, wantSource = "alice", queue.SourceDashboard
			}
			if r.Action != x.action || r.Actor != wantActor || r.Source != wantSource || r.DBRole != currentRole(t, pool) ||
				r.FinishedAt == nil || r.Error != "" || time.Since(r.At) > time.Minute {
				t.Errorf("%s by %q recorded as %+v", x.action, actor, r)
			}
			// The second round finds nothing left to change, but for the
			// ones that make what they change.
			if actor == "" && r.Affected != x.affected {
				t.Errorf("%s: affected %d, want %d", x.action, r.Affected, x.affected)
			}
			if actor != "" && x.action == queue.AuditEnqueue && r.Affected != x.affected {
				t.Errorf("%s: affected %d, want %d", x.action, r.Affected, x.affected)
			}
			var req map[string]any
			if err := json.Unmarshal(r.Request, &req); err != nil {
				t.Fatalf("%s: request %s: %v", x.action, r.Request, err)
			}
			if compact := strings.ReplaceAll(string(r.Request), `":[`, `": [`); !strings.Contains(compact, x.request) &&
				!strings.Contains(string(r.Request), x.request) {
				t.Errorf("%s: request %s lacks %s", x.action, r.Request, x.request)
			}
		}
		if got := len(auditRows(t, c)) - before; x.action != queue.AuditEnqueue && got != 2 {
			t.Errorf("%s: %d records for two calls", x.action, got)
		}
	}
	// A limit that is not set is an error, and no change: no record.
	n := len(auditRows(t, c))
	if err := c.RemoveLimit(context.Background(), queue.Limit{Queue: "mail"}); !errors.Is(err, queue.ErrLimitNotFound) {
		t.Fatalf("RemoveLimit of no limit = %v, want ErrLimitNotFound", err)
	}
	if got := len(auditRows(t, c)); got != n {
		t.Fatalf("RemoveLimit of no limit left %d audit records", got-n)
	}
}

// A producer's enqueue is not recorded; a dry run (a Tx method rolled back)
// leaves no record; a committed one leaves one.
func TestAuditTxAndProducers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	if _, err := c.Enqueue(ctx, "send", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueMany(ctx, []queue.NewTask{{Name: "a"}, {Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	id := insert(t, pool, "mail", "send", queue.StatusFailed, 1, 1, failedHistory("down"))
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	scheduled, err := c.Enqueue(ctx, "later", nil, queue.WithDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	other := insert(t, pool, "mail", "send", queue.StatusFailed, 1, 1, failedHistory("smtp refused"))
	if res, err := c.RequeueTx(ctx, tx, queue.RequeueRequest{IDs: []int64{id}}); err != nil || res.Changed != 1 {
		t.Fatalf("RequeueTx: %+v, %v", res, err)
	}
	if res, err := c.RunNowTx(ctx, tx, []int64{scheduled}); err != nil || res.Changed != 1 || !slices.Equal(res.IDs, []int64{scheduled}) {
		t.Fatalf("RunNowTx: %+v, %v", res, err)
	}
	purge := queue.PurgeRequest{Filter: queue.Filter{FinishedBefore: time.Now().Add(time.Hour), ErrorContains: "REFUSED"}}
	if res, err := c.PurgeTx(ctx, tx, purge); err != nil || res.Changed != 1 {
		t.Fatalf("PurgeTx of the task whose error says refused: %+v, %v", res, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if get(t, c, other).Status != queue.StatusFailed || get(t, c, id).Status != queue.StatusFailed {
		t.Fatal("a rolled-back dry run changed tasks")
	}
	if rows := auditRows(t, c); len(rows) != 0 {
		t.Fatalf("records after producers' enqueues and a dry run: %+v", rows)
	}
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteTx(ctx, tx, []int64{id}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if rows := auditRows(t, c); len(rows) != 1 || rows[0].Action != queue.AuditDelete || rows[0].Affected != 1 {
		t.Fatalf("records after a committed DeleteTx: %+v", rows)
	}
}

// A record that cannot be written fails the change, which changes nothing:
// in its own transaction, or before the first batch of a batched one.
func TestAuditFailureFailsTheChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	if _, err := pool.Exec(ctx, `ALTER TABLE skiplock_audit ADD CONSTRAINT refused CHECK (action NOT IN ('pause', 'purge', 'requeue'))`); err != nil {
		t.Fatal(err)
	}
	insert(t, pool, "mail", "send", queue.StatusPending, 0, 3, `[]`)
	if err := c.PauseQueue(ctx, "mail"); err == nil {
		t.Fatal("PauseQueue succeeded without its audit record")
	}
	if stats, err := c.Stats(ctx); err != nil || len(stats.Queues) != 1 || stats.Queues[0].PausedAt != nil {
		t.Fatalf("stats %+v (%v): paused without a record", stats, err)
	}
	done := insert(t, pool, "mail", "send", queue.StatusCompleted, 1, 3, `[]`)
	if res, err := c.Purge(ctx, queue.PurgeRequest{Filter: queue.Filter{FinishedBefore: time.Now().Add(time.Hour)}}); err == nil || res.Changed != 0 {
		t.Fatalf("Purge = %+v, %v; want an error and nothing purged", res, err)
	}
	failed := insert(t, pool, "mail", "send", queue.StatusFailed, 1, 1, failedHistory("down"))
	for _, req := range []queue.RequeueRequest{{IDs: []int64{failed}}, {Filter: queue.Filter{Queues: []string{"mail"}}}} {
		if res, err := c.Requeue(ctx, req); err == nil || res.Changed != 0 {
			t.Fatalf("Requeue(%+v) = %+v, %v; want an error and nothing requeued", req, res, err)
		}
	}
	if get(t, c, done).Status != queue.StatusCompleted || get(t, c, failed).Status != queue.StatusFailed {
		t.Fatal("tasks changed without their audit record")
	}
	if rows := auditRows(t, c); len(rows) != 0 {
		t.Fatalf("records: %+v", rows)
	}
}

// A batched change that stops part way records what it did and the error.
func TestAuditBatchedPartialFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	var ids []int64
	for range 5 {
		ids = append(ids, insert(t, pool, "mail", "send", queue.StatusFailed, 1, 1, failedHistory("down")))
	}
	// The third batch's count cannot be recorded, so the batch fails.
	if _, err := pool.Exec(ctx, `
		CREATE FUNCTION refuse_third() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.affected > 4 THEN RAISE EXCEPTION 'no more'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_third BEFORE UPDATE ON skiplock_audit FOR EACH ROW EXECUTE FUNCTION refuse_third();`); err != nil {
		t.Fatal(err)
	}
	res, err := c.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{Queues: []string{"mail"}}, BatchSize: 2})
	if err == nil || !strings.Contains(err.Error(), "no more") || res.Changed != 4 {
		t.Fatalf("Requeue = %+v, %v; want 4 requeued and the error", res, err)
	}
	rows := auditRows(t, c)
	if len(rows) != 1 || rows[0].Affected != 4 || !strings.Contains(rows[0].Error, "no more") || rows[0].FinishedAt == nil {
		t.Fatalf("records: %+v", rows)
	}
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks WHERE status = 'pending'`).Scan(&pending); err != nil || pending != 4 {
		t.Fatalf("%d tasks requeued (%v), want 4", pending, err)
	}
}

// An actor with an unknown source is refused before anything changes.
func TestAuditActorSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	insert(t, pool, "mail", "send", queue.StatusPending, 0, 3, `[]`)
	bad := queue.WithActor(ctx, queue.Actor{Name: "bob", Source: "cron"})
	if err := c.PauseQueue(bad, "mail"); !errors.Is(err, queue.ErrInvalidRequest) {
		t.Fatalf("PauseQueue with source cron: %v, want ErrInvalidRequest", err)
	}
	if _, err := c.Enqueue(bad, "send", nil); !errors.Is(err, queue.ErrInvalidRequest) {
		t.Fatalf("Enqueue with source cron: %v, want ErrInvalidRequest", err)
	}
	// No source: an API change, with the name given.
	if err := c.PauseQueue(queue.WithActor(ctx, queue.Actor{Name: "bob"}), "mail"); err != nil {
		t.Fatal(err)
	}
	rows := auditRows(t, c)
	if len(rows) != 1 || rows[0].Actor != "bob" || rows[0].Source != queue.SourceAPI {
		t.Fatalf("records: %+v", rows)
	}
}

// AuditLog lists the newest first, filters, and pages by ID.
func TestAuditLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	insert(t, pool, "a", "send", queue.StatusPending, 0, 3, `[]`)
	insert(t, pool, "b", "send", queue.StatusPending, 0, 3, `[]`)
	alice := queue.WithActor(ctx, queue.Actor{Name: "alice", Source: queue.SourceCLI})
	bob := queue.WithActor(ctx, queue.Actor{Name: "bob", Source: queue.SourceDashboard})
	for _, step := range []func() error{
		func() error { return c.PauseQueue(alice, "a") },
		func() error { return c.PauseQueue(bob, "b") },
		func() error { return c.ResumeQueue(alice, "a") },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE skiplock_audit SET at = now() - interval '2 days' WHERE request->>'queue' = 'b'`); err != nil {
		t.Fatal(err)
	}
	list := func(f queue.AuditFilter) string {
		t.Helper()
		rows, err := c.AuditLog(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rows {
			var req struct{ Queue string }
			json.Unmarshal(r.Request, &req)
			out = append(out, string(r.Action)+" "+req.Queue+" "+r.Actor+" "+string(r.Source))
		}
		return strings.Join(out, ", ")
	}
	for _, x := range []struct {
		f    queue.AuditFilter
		want string
	}{
		{queue.AuditFilter{}, "resume a alice cli, pause b bob dashboard, pause a alice cli"},
		{queue.AuditFilter{Actor: "alice"}, "resume a alice cli, pause a alice cli"},
		{queue.AuditFilter{Action: queue.AuditPause}, "pause b bob dashboard, pause a alice cli"},
		{queue.AuditFilter{Source: queue.SourceDashboard}, "pause b bob dashboard"},
		{queue.AuditFilter{Since: time.Now().Add(-time.Hour)}, "resume a alice cli, pause a alice cli"},
		{queue.AuditFilter{Limit: 1}, "resume a alice cli"},
	} {
		if got := list(x.f); got != x.want {
			t.Errorf("AuditLog(%+v) = %q, want %q", x.f, got, x.want)
		}
	}
	all, _ := c.AuditLog(ctx, queue.AuditFilter{})
	if got := list(queue.AuditFilter{BeforeID: all[0].ID}); got != "pause b bob dashboard, pause a alice cli" {
		t.Errorf("the page before %d: %q", all[0].ID, got)
	}
	for _, f := range []queue.AuditFilter{{Limit: -1}, {Limit: queue.MaxAuditLimit + 1}, {Action: "nap"}} {
		if _, err := c.AuditLog(ctx, f); !errors.Is(err, queue.ErrInvalidRequest) {
			t.Errorf("AuditLog(%+v): %v, want ErrInvalidRequest", f, err)
		}
	}
}
