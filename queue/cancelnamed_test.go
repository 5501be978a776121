package queue_test

import (
	"context"
	"slices"
	"testing"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// Cancel with StatusRunning among its statuses: the named pending tasks
// cancelled and the running ones asked to cancel, in one transaction with
// one audit record.
func TestCancelNamedRunning(t *testing.T) {
	t.Parallel()
	ctx := queue.WithActor(context.Background(), queue.Actor{Name: "ops", Source: queue.SourceAPI})
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	pending := insert(t, pool, "a", "n", queue.StatusPending, 0, 1, `[]`)
	running := insert(t, pool, "a", "n", queue.StatusRunning, 1, 1, `[]`)
	done := insert(t, pool, "a", "n", queue.StatusCompleted, 1, 1, `[]`)
	res, err := c.Cancel(ctx, queue.CancelRequest{IDs: []int64{pending, running, done},
		Filter: queue.Filter{Statuses: []queue.Status{queue.StatusPending, queue.StatusRunning}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != 1 || !slices.Equal(res.IDs, []int64{pending}) || !slices.Equal(res.Requested, []int64{running}) {
		t.Fatalf("Cancel = %+v; want %d cancelled, %d requested", res, pending, running)
	}
	want := []queue.SkippedTask{{ID: running, Status: queue.StatusRunning}, {ID: done, Status: queue.StatusCompleted}}
	if !slices.Equal(res.Skipped, want) {
		t.Fatalf("Skipped = %+v, want %+v", res.Skipped, want)
	}
	if got := count(t, pool, "status = 'running' AND cancel_requested_at IS NOT NULL"); got != 1 {
		t.Fatalf("%d running tasks have a request, want 1", got)
	}
	log, err := c.AuditLog(ctx, queue.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 1 || log[0].Action != queue.AuditCancel || log[0].Affected != 2 {
		t.Fatalf("audit trail = %+v, want one cancel record of 2 tasks", log)
	}

	// By default, a running task is left alone.
	other := insert(t, pool, "a", "n", queue.StatusRunning, 1, 1, `[]`)
	res, err = c.Cancel(ctx, queue.CancelRequest{IDs: []int64{other}})
	if err != nil || res.Changed != 0 || len(res.Requested) != 0 || count(t, pool, "cancel_requested_at IS NOT NULL") != 1 {
		t.Fatalf("Cancel without StatusRunning = %+v, %v; want nothing changed", res, err)
	}
}
