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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
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
		if !errors.Is(err, migrations.ErrNotMigrated) || !strings.Contains(err.Error(), "skiplock migrate up") {
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
// fresh backlog worked without vacuum), no outcome write may compare every
// row it finds with every row of the batch (a nested loop with a join
// filter), reached through the partial running index or a scan the planner
// guessed would keep one row. TaskFinishMany and TaskCompleteMany run after
// OutcomePlanSettings, on a generic plan (pgx's statement cache) or planned
// per call (a pool of unnamed statements), and must probe the primary key
// per row of the batch in both; TaskCompleteManyDeleting, planned per call,
// probes it or hashes the batch. Both sizes matter: an old write took the
// running index at 250 rows and a join-filtered scan at 1,000 (137-272 us
// a task).
func TestOutcomeWritePlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.execAll(t,
		`INSERT INTO skiplock_tasks (name) SELECT 'p' FROM generate_series(1, 50000)`,
		`UPDATE skiplock_tasks SET status = 'running', attempt = 1, worker_id = 'w' WHERE id IN (SELECT id FROM skiplock_tasks ORDER BY id LIMIT 2500)`,
		`UPDATE skiplock_tasks SET status = 'completed', finished_at = now() WHERE status = 'running'`,
		`UPDATE skiplock_tasks SET status = 'running', attempt = 1, worker_id = 'w' WHERE id IN (SELECT id FROM skiplock_tasks WHERE status = 'pending' ORDER BY id LIMIT 1000)`,
	)
	var running []int64
	if err := b.pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM skiplock_tasks WHERE status = 'running'`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	q := db.New()
	for _, n := range []int{250, 1000} {
		p := db.TaskFinishManyParams{WorkerID: "w", Ids: running[:n]}
		for range n {
			p.Attempts = append(p.Attempts, 1)
			p.ClaimedUs = append(p.ClaimedUs, time.Now().UnixMicro())
			p.Statuses = append(p.Statuses, "completed")
			p.DelayMs = append(p.DelayMs, -1)
			p.Refunds = append(p.Refunds, 0)
			p.Errors = append(p.Errors, json.RawMessage("null"))
			p.Outputs = append(p.Outputs, json.RawMessage("null"))
		}
		type how struct {
			settings bool // after OutcomePlanSettings, as the worker writes TaskFinishMany and TaskCompleteMany
			generic  bool // on the generic plan of a prepared statement (pgx's statement cache)
		}
		writes := map[string]struct {
			write func(explainer) error
			hows  []how
		}{
			"TaskFinishMany": {func(e explainer) error { _, err := q.TaskFinishMany(ctx, e, p); return err },
				[]how{{true, true}, {true, false}}},
			"TaskCompleteMany": {func(e explainer) error {
				_, err := q.TaskCompleteMany(ctx, e, db.TaskCompleteManyParams{WorkerID: p.WorkerID, Ids: p.Ids, Attempts: p.Attempts, ClaimedUs: p.ClaimedUs})
				return err
			}, []how{{true, true}, {true, false}}},
			"TaskCompleteManyDeleting": {func(e explainer) error {
				_, err := q.TaskCompleteManyDeleting(ctx, e, db.TaskCompleteManyDeletingParams{WorkerID: p.WorkerID, Ids: p.Ids, Attempts: p.Attempts, ClaimedUs: p.ClaimedUs})
				return err
			}, []how{{false, false}}},
		}
		for name, w := range writes {
			for _, h := range w.hows {
				e := explainer{pool: b.pool, generic: h.generic}
				if h.settings {
					e.settings = outcomeSettingsSQL(t)
				}
				var plan *explained
				if err := w.write(e); !errors.As(err, &plan) {
					t.Fatalf("%s (%+v): %v", name, h, err)
				}
				if strings.Contains(plan.text, "skiplock_tasks_running_idx") || strings.Contains(plan.text, "Join Filter") ||
					(h.settings && strings.Contains(plan.text, "Seq Scan on skiplock_tasks")) ||
					!(strings.Contains(plan.text, "Index Scan using skiplock_tasks_pkey") || (!h.settings && strings.Contains(plan.text, "Hash Join"))) {
					t.Fatalf("%s of %d rows (%+v) is planned as a scan of running rows times the batch, or of the table:\n%s", name, n, h, plan.text)
				}
			}
		}
	}
}

// TestSuspectLookPlan: a worker's look for suspects (at start, and when
// told some may exist) reads the suspect index, whatever the backlog:
// walking the claim index, the recount and the next suspect read every
// pending task of the worker's queues, twice, in each process at start.
// Both plans, custom (the first executions of a statement) and generic.
func TestSuspectLookPlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.execAll(t,
		`INSERT INTO skiplock_tasks (name) SELECT 'p' FROM generate_series(1, 50000)`,
		`UPDATE skiplock_tasks SET crashes = 1 WHERE id IN (SELECT id FROM skiplock_tasks ORDER BY id DESC LIMIT 3)`,
		`ANALYZE skiplock_tasks`,
	)
	q := db.New()
	queues := []string{"default"}
	looks := map[string]func(explainer) error{
		"TaskSuspectNext": func(e explainer) error {
			_, err := q.TaskSuspectNext(ctx, e, db.TaskSuspectNextParams{Queues: queues, Names: []string{"p"}})
			return err
		},
		"TaskSuspectsRecount": func(e explainer) error { _, err := q.TaskSuspectsRecount(ctx, e, queues); return err },
	}
	for name, look := range looks {
		for _, generic := range []bool{false, true} {
			var plan *explained
			if err := look(explainer{pool: b.pool, generic: generic}); !errors.As(err, &plan) {
				t.Fatalf("%s: %v", name, err)
			}
			if !strings.Contains(plan.text, "skiplock_tasks_suspect_idx") || strings.Contains(plan.text, "skiplock_tasks_claim_idx") ||
				strings.Contains(plan.text, "Seq Scan on skiplock_tasks") {
				t.Fatalf("%s (generic %v) does not read the suspect index alone:\n%s", name, generic, plan.text)
			}
		}
	}
}

// execAll runs each statement on the bundle's pool, in order.
func (b *bundle) execAll(t *testing.T, statements ...string) {
	t.Helper()
	for _, sql := range statements {
		if _, err := b.pool.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
}

// outcomeSettingsSQL is the text of queries.OutcomePlanSettings.
func outcomeSettingsSQL(t *testing.T) string {
	var r sqlRecorder
	if err := db.New().OutcomePlanSettings(context.Background(), &r); err != nil {
		t.Fatal(err)
	}
	return r.sql
}

// sqlRecorder is a db.DBTX that keeps the text of the statement it is given.
type sqlRecorder struct{ sql string }

func (r *sqlRecorder) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	r.sql = sql
	return pgconn.CommandTag{}, nil
}

func (r *sqlRecorder) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("sqlRecorder: Query")
}

func (r *sqlRecorder) QueryRow(context.Context, string, ...any) pgx.Row {
	panic("sqlRecorder: QueryRow")
}

// explainer runs a generated query's statement under EXPLAIN, with the
// arguments the query passes, and returns the plan as an error. With
// settings, that statement runs first in the same transaction; with
// generic, the plan is the generic plan of the statement prepared.
type explainer struct {
	pool     *pgxpool.Pool
	settings string
	generic  bool
}

type explained struct{ text string }

func (e *explained) Error() string { return "explained:\n" + e.text }

func (e explainer) explain(ctx context.Context, sql string, args ...any) error {
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if e.settings != "" {
		if _, err := tx.Exec(ctx, e.settings); err != nil {
			return err
		}
	}
	explain := "EXPLAIN " + sql
	if e.generic {
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "PREPARE explained_write AS "+sql); err != nil {
			return err
		}
		// A prepared statement outlives the transaction.
		defer tx.Conn().Exec(ctx, "DEALLOCATE explained_write")
		// A generic plan is the same whatever the values: NULLs will do.
		explain = "EXPLAIN EXECUTE explained_write(" + strings.TrimSuffix(strings.Repeat("NULL, ", len(args)), ", ") + ")"
		args = nil
	}
	rows, err := tx.Query(ctx, explain, append([]any{pgx.QueryExecModeExec}, args...)...)
	if err != nil {
		return err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	return &explained{text: strings.Join(lines, "\n")}
}

func (e explainer) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return nil, e.explain(ctx, sql, args...)
}

func (e explainer) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, e.explain(ctx, sql, args...)
}

func (e explainer) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return explainedRow{e.explain(ctx, sql, args...)}
}

// explainedRow is a row whose Scan returns the plan.
type explainedRow struct{ err error }

func (r explainedRow) Scan(...any) error { return r.err }
