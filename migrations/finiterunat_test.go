package migrations_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
)

// Migration 21: a task's run_at is a point in time. Tasks that the SQL
// enqueue function had stored at '-infinity' (which made every claim of
// their queue fail: no client reads it into a time) become due at their
// creation; at 'infinity', the last time PostgreSQL has. Afterwards the
// function refuses both as an invalid task.
func TestFiniteRunAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, pgtest.Schema(t, false))
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// Back to 20, before the migration.
	if err := migrations.Steps(ctx, pool, -(int(migrations.Latest) - 20)); err != nil {
		t.Fatal(err)
	}
	var early, never int64
	if err := pool.QueryRow(ctx, `SELECT id FROM skiplock_enqueue_task('job', run_at => '-infinity')`).Scan(&early); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT id FROM skiplock_enqueue_task('job', run_at => 'infinity')`).Scan(&never); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var earlyAt, created, neverAt time.Time
	if err := pool.QueryRow(ctx, `SELECT run_at, created_at FROM skiplock_tasks WHERE id = $1`, early).Scan(&earlyAt, &created); err != nil {
		t.Fatal(err)
	}
	if !earlyAt.Equal(created) {
		t.Fatalf("the task at -infinity runs at %v, want its creation %v", earlyAt, created)
	}
	if err := pool.QueryRow(ctx, `SELECT run_at FROM skiplock_tasks WHERE id = $1`, never).Scan(&neverAt); err != nil {
		t.Fatal(err)
	}
	if neverAt.Year() != 294276 {
		t.Fatalf("the task at infinity runs at %v, want the last time PostgreSQL has", neverAt)
	}
	for _, at := range []string{"-infinity", "infinity"} {
		_, err := pool.Exec(ctx, `SELECT skiplock_enqueue_task('job', run_at => $1::timestamptz)`, at)
		if err = pgerr.Interpret(err); !errors.Is(err, pgerr.ErrInvalidTask) {
			t.Fatalf("run_at %s: %v, want an invalid task", at, err)
		}
	}
}
