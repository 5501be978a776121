package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestRunErrors(t *testing.T) {
	t.Parallel()
	ok := worker.Handlers{"x": func(context.Context, *worker.Task) error { return nil }}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	t.Run("not migrated", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t, pgtest.Schema(t, false))
		err := worker.New(pool, worker.Config{Logger: quiet}).Run(context.Background(), ok)
		if !errors.Is(err, worker.ErrNotMigrated) || !strings.Contains(err.Error(), "skiplock migrate up") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no handlers", func(t *testing.T) {
		t.Parallel()
		err := worker.New(pgtest.Pool(t), worker.Config{Logger: quiet}).Run(context.Background(), nil)
		if !errors.Is(err, worker.ErrNoHandlers) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		t.Parallel()
		err := worker.New(pgtest.Pool(t), worker.Config{Concurrency: -1, Queues: []string{"a", "a"}}).Run(context.Background(), ok)
		if err == nil || !strings.Contains(err.Error(), "Concurrency must be positive") || !strings.Contains(err.Error(), `"a" listed twice`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("unreachable database", func(t *testing.T) {
		// Not a configuration error: Run waits for the database until its
		// context ends (TestStartWaitsForDatabase), then returns nil.
		t.Parallel()
		pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := worker.New(pool, worker.Config{Logger: quiet}).Run(ctx, ok); err != nil {
			t.Fatalf("err = %v, want nil once the context ends", err)
		}
	})
}

// TestOutcomeWritePlan: on a table that was never analyzed, with the
// entries of thousands of finished tasks still in the running index (a
// fresh backlog worked without vacuum), the outcome write must not read the
// partial running index and compare every running row with every row of
// the batch (a nested loop with a join filter): it probes the primary key
// per row, or hashes the batch on a table small enough to scan.
func TestOutcomeWritePlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO skiplock_tasks (name) SELECT 'p' FROM generate_series(1, 3000)`,
		`UPDATE skiplock_tasks SET status = 'running', attempt = 1, worker_id = 'w' WHERE id IN (SELECT id FROM skiplock_tasks ORDER BY id LIMIT 2500)`,
		`UPDATE skiplock_tasks SET status = 'completed', finished_at = now() WHERE status = 'running'`,
		`UPDATE skiplock_tasks SET status = 'running', attempt = 1, worker_id = 'w' WHERE id IN (SELECT id FROM skiplock_tasks WHERE status = 'pending' ORDER BY id LIMIT 250)`,
	} {
		if _, err := b.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var ids []int64
	if err := b.pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM skiplock_tasks WHERE status = 'running'`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	n := len(ids)
	attempts, statuses, delays, refunds := make([]int32, n), make([]string, n), make([]int64, n), make([]int32, n)
	errs, outputs := make([]json.RawMessage, n), make([]json.RawMessage, n)
	for i := range n {
		attempts[i], statuses[i], delays[i], errs[i], outputs[i] = 1, "completed", -1, json.RawMessage("null"), json.RawMessage("null")
	}
	rows, err := b.pool.Query(ctx, "EXPLAIN "+db.TaskFinishManySQL, pgx.QueryExecModeExec, "w", ids, attempts, statuses, delays, refunds, errs, outputs)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if strings.Contains(plan, "skiplock_tasks_running_idx") || strings.Contains(plan, "Join Filter") ||
		!(strings.Contains(plan, "Index Scan using skiplock_tasks_pkey") || strings.Contains(plan, "Hash Join")) {
		t.Fatalf("the outcome write of %d rows is planned as a scan of running rows times the batch:\n%s", n, plan)
	}
}
