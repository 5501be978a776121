package worker

import (
	"context"
	"testing"
	"time"
)

func TestRetirerKeepsWhatRetentionSays(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	g := newGuard(b.deps(t, "w1", ModeLease, nil, nil))
	rows := b.claim(t, g, "w1", 3)
	b.exec(t, "UPDATE skiplock_tasks SET status = 'completed', finished_at = now() - interval '1 hour' WHERE id = $1", rows[0].ID)
	b.exec(t, "UPDATE skiplock_tasks SET status = 'completed', finished_at = now() WHERE id = $1", rows[1].ID)
	b.exec(t, "UPDATE skiplock_tasks SET status = 'failed', finished_at = now() - interval '1 hour' WHERE id = $1", rows[2].ID)
	r := newRetirer(Config{RetainCompleted: time.Minute, RetainFailed: -1, RetainCancelled: -1}, func() bool { return true }, b.queries, b.pool, b.log)
	if got := r.every(); got != 30*time.Second {
		t.Errorf("retires every %s with a 1m retention, want 30s", got)
	}
	r.retire(context.Background())
	var left []int64
	if err := b.pool.QueryRow(context.Background(), "SELECT array_agg(id ORDER BY id) FROM skiplock_tasks").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] != rows[1].ID || left[1] != rows[2].ID {
		t.Errorf("tasks left %v, want the recent completed one and the failed one kept forever: %d, %d", left, rows[1].ID, rows[2].ID)
	}
}

// The retirer deletes a workflow's row once its tasks are all gone and it
// is past workflowGrace; a workflow with a task left, or a new one, stays.
func TestRetirerDeletesEmptyWorkflows(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	var gone, kept, young int64
	for _, w := range []struct {
		id  *int64
		age string
	}{{&gone, "1 hour"}, {&kept, "1 hour"}, {&young, "1 second"}} {
		if err := b.pool.QueryRow(context.Background(),
			"INSERT INTO skiplock_workflows (created_at) VALUES (now() - $1::interval) RETURNING id", w.age).Scan(w.id); err != nil {
			t.Fatal(err)
		}
	}
	b.exec(t, "INSERT INTO skiplock_tasks (name, workflow_id) VALUES ('step', $1)", kept)
	r := newRetirer(Config{RetainCompleted: -1, RetainFailed: -1, RetainCancelled: -1}, func() bool { return true }, b.queries, b.pool, b.log)
	r.retire(context.Background())
	var left []int64
	if err := b.pool.QueryRow(context.Background(), "SELECT array_agg(id ORDER BY id) FROM skiplock_workflows").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] != kept || left[1] != young {
		t.Errorf("workflows left %v, want %d (has a task) and %d (new)", left, kept, young)
	}
}

// The retirer deletes audit records older than RetainAudit and keeps the
// newer ones; a negative RetainAudit keeps them all.
func TestRetirerDeletesOldAuditRecords(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	for _, age := range []string{"100 days", "91 days", "89 days", "1 minute"} {
		b.exec(t, "INSERT INTO skiplock_audit (at, source, action, request) VALUES (now() - $1::interval, 'cli', 'requeue', jsonb_build_object('age', $2::text))", age, age)
	}
	left := func() []string {
		t.Helper()
		var ages []string
		if err := b.pool.QueryRow(context.Background(), "SELECT coalesce(array_agg(request->>'age' ORDER BY id), '{}') FROM skiplock_audit").Scan(&ages); err != nil {
			t.Fatal(err)
		}
		return ages
	}
	keep := Config{RetainCompleted: -1, RetainFailed: -1, RetainCancelled: -1, RetainAudit: -1}
	newRetirer(keep, func() bool { return true }, b.queries, b.pool, b.log).retire(context.Background())
	if got := left(); len(got) != 4 {
		t.Fatalf("RetainAudit -1 left %v, want all 4", got)
	}
	cfg, err := Config{RetainCompleted: -1, RetainFailed: -1, RetainCancelled: -1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RetainAudit != 90*24*time.Hour {
		t.Fatalf("RetainAudit defaults to %s", cfg.RetainAudit)
	}
	newRetirer(cfg, func() bool { return true }, b.queries, b.pool, b.log).retire(context.Background())
	if got := left(); len(got) != 2 || got[0] != "89 days" || got[1] != "1 minute" {
		t.Fatalf("records left %v, want the ones of 89 days and 1 minute", got)
	}
}

// The retirer deletes a batch's row once its tasks are all gone and it is
// past workflowGrace; a batch with a task left, or a new one, stays.
func TestRetirerDeletesEmptyBatches(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	var gone, kept, young int64
	for _, w := range []struct {
		id  *int64
		age string
	}{{&gone, "1 hour"}, {&kept, "1 hour"}, {&young, "1 second"}} {
		if err := b.pool.QueryRow(context.Background(),
			"INSERT INTO skiplock_batches (total, created_at) VALUES (1, now() - $1::interval) RETURNING id", w.age).Scan(w.id); err != nil {
			t.Fatal(err)
		}
	}
	b.exec(t, "INSERT INTO skiplock_tasks (name, batch_id, status, finished_at) VALUES ('member', $1, 'completed', now())", kept)
	r := newRetirer(Config{RetainCompleted: -1, RetainFailed: -1, RetainCancelled: -1}, func() bool { return true }, b.queries, b.pool, b.log)
	r.retire(context.Background())
	var left []int64
	if err := b.pool.QueryRow(context.Background(), "SELECT array_agg(id ORDER BY id) FROM skiplock_batches").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] != kept || left[1] != young {
		t.Errorf("batches left %v, want %d (has a task) and %d (new)", left, kept, young)
	}
}
