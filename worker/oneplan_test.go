package worker

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// The lock session's plain claim runs on one generic plan, made the first
// time it runs (here on a backlog of 20,000 never analyzed) and made again
// after ANALYZE: whatever the table held then, the plan reads the claim
// index in claim order and finds each row by its primary key. Left to its
// estimates, PostgreSQL's generic plan for both is a bitmap scan and a sort
// of every pending row (11-23 ms a claim here, against 3). The claim takes
// rows in claim order, from the head when use_after is off (the lowest
// priority and time there are), and past the cursor when it is on.
func TestPlainClaimOnePlan(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	ls, p := openClaimSession(t, b)
	claim := func(max int32) []db.TaskClaimRow {
		t.Helper()
		p.Max = max
		rows, gen, _, err := ls.claim(p, howPlain)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		ls.release(ids, nil, nil, gen, false)
		return rows
	}
	for _, sql := range []string{
		// A backlog as EnqueueMany leaves it: one run_at, one priority.
		`INSERT INTO skiplock_tasks (name, payload) SELECT 'job', jsonb_build_object('n', g) FROM generate_series(1, 20000) AS g`,
		`INSERT INTO skiplock_tasks (name, priority) SELECT 'job', 1 FROM generate_series(1, 100)`,
		// The least claim position there is: the head bound still admits it.
		`INSERT INTO skiplock_tasks (name, priority, run_at) VALUES ('job', -32768, now() - interval '1000 years')`,
	} {
		if _, err := b.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var first int64
	if err := b.pool.QueryRow(ctx, `SELECT id FROM skiplock_tasks WHERE priority = -32768`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	rows := claim(100)
	if len(rows) != 100 || rows[0].ID != first {
		t.Fatalf("head claim: %d rows, first %d, want 100 from %d", len(rows), rows[0].ID, first)
	}
	for i := 2; i < len(rows); i++ {
		if rows[i].Priority != 0 || rows[i].ID < rows[i-1].ID {
			t.Fatalf("row %d out of claim order: %+v after %+v", i, rows[i], rows[i-1])
		}
	}
	// Past a cursor: priority 1 onwards.
	p.UseAfter, p.AfterPriority, p.AfterRunAt, p.AfterID = true, 0, time.Now().AddDate(1, 0, 0), 0
	if rows := claim(50); len(rows) != 50 || rows[0].Priority != 1 {
		t.Fatalf("cursor claim: %d rows, first %+v; want 50 of priority 1", len(rows), rows[0])
	}
	p.UseAfter = false
	for range 6 { // past the five calls after which PostgreSQL would choose for itself
		if rows := claim(20); len(rows) != 20 {
			t.Fatalf("claimed %d, want 20", len(rows))
		}
	}
	checkPlan := func(when string, wantGeneric int64) {
		t.Helper()
		if plan := sessionPlan(t, b, ls, "TaskClaimPlain", when, wantGeneric); !claimOrderPlan(plan, "Sort") {
			t.Fatalf("%s: the claim's plan:\n%s", when, plan)
		}
	}
	checkPlan("planned on a backlog never analyzed", 8)
	if _, err := b.pool.Exec(ctx, `ANALYZE skiplock_tasks`); err != nil {
		t.Fatal(err)
	}
	if rows := claim(20); len(rows) != 20 {
		t.Fatalf("claimed %d after ANALYZE, want 20", len(rows))
	}
	checkPlan("planned again after ANALYZE", 9)
}

// The claim within a held block of a queue limit far above what runs runs
// on the lock session's one generic plan too, read as the plain claim's:
// the claim index in claim order, each row by its primary key.
func TestHeldClaimOnePlan(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO skiplock_tasks (name) SELECT 'job' FROM generate_series(1, 20000)`); err != nil {
		t.Fatal(err)
	}
	ls, p := openClaimSession(t, b)
	p.Max = 20
	last := int64(0)
	claim := func(how claimHow) claimHow {
		t.Helper()
		rows, gen, ran, err := ls.claim(p, how)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 20 {
			t.Fatalf("%v claim took %d rows, want 20", ran, len(rows))
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			if r.ID < last {
				t.Fatalf("row %d out of claim order after %d", r.ID, last)
			}
			ids[i], last = r.ID, r.ID
		}
		ls.release(ids, nil, nil, gen, false)
		return ran
	}
	if ran := claim(howQueue); ran != howQueue {
		t.Fatalf("first claim ran as %v", ran)
	}
	for range 8 {
		if ran := claim(howHeld); ran != howHeld {
			t.Fatalf("claim within the held block ran as %v", ran)
		}
	}
	// A sort of its rows in claim order is what must not be there.
	if plan := sessionPlan(t, b, ls, "TaskClaimHeld", "planned on a backlog never analyzed", 8); !claimOrderPlan(plan, "Sort Key: p.priority") {
		t.Fatalf("the held claim's plan:\n%s", plan)
	}
}

// The queue claim under a limit that binds (each claim takes what the
// places left allow, and counts the running rows to find out) runs on the
// lock session's one generic plan too: the claim index in claim order,
// each row by its primary key, and never more rows than the places left.
func TestQueueClaimOnePlan(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	const limit = 30
	if err := b.client.SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: limit}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO skiplock_tasks (name) SELECT 'job' FROM generate_series(1, 20000)`); err != nil {
		t.Fatal(err)
	}
	ls, p := openClaimSession(t, b)
	p.Max, p.CheckFull = 20, true
	last := int64(0)
	var running []db.TaskClaimRow
	gen := uint64(0)
	for i := range 8 {
		rows, g, ran, err := ls.claim(p, howQueue)
		if err != nil {
			t.Fatal(err)
		}
		gen = g
		if ran != howQueue {
			t.Fatalf("claim ran as %v", ran)
		}
		// Claims alternate: 20 rows, then the 10 places left; then all
		// of the earlier claim's are given back and the next takes 20.
		if want := min(20, limit-len(running)); len(rows) != want {
			t.Fatalf("claim %d took %d rows with %d running, want %d", i, len(rows), len(running), want)
		}
		for _, r := range rows {
			if r.ID < last {
				t.Fatalf("row %d out of claim order after %d", r.ID, last)
			}
			last = r.ID
		}
		running = append(running, rows...)
		if len(running) == limit {
			// The outcomes are written, then the locks released.
			ids := make([]int64, len(running))
			var blocks []int32
			for j, r := range running {
				ids[j] = r.ID
				blocks = append(blocks, r.LimitLocks...)
			}
			if _, err := b.pool.Exec(ctx, `UPDATE skiplock_tasks SET status = 'completed', finished_at = now() WHERE id = ANY($1)`, ids); err != nil {
				t.Fatal(err)
			}
			ls.release(ids, blocks, nil, gen, true)
			running = nil
		}
	}
	if plan := sessionPlan(t, b, ls, "TaskClaimQueue", "planned on a backlog never analyzed", 8); !claimOrderPlan(plan, "Sort Key: p.priority") {
		t.Fatalf("the queue claim's plan:\n%s", plan)
	}
}

// claimOrderPlan reports whether a claim's plan reads the claim index in
// claim order and each row by its primary key: no sequential or bitmap
// scan of the task table, and no sort that sort names.
func claimOrderPlan(plan, sort string) bool {
	return strings.Contains(plan, "Index Scan using skiplock_tasks_claim_idx") &&
		strings.Contains(plan, "Index Scan using skiplock_tasks_pkey") &&
		!strings.Contains(plan, "Seq Scan on skiplock_tasks") && !strings.Contains(plan, "Bitmap") &&
		!strings.Contains(plan, sort)
}

// sessionPlan checks that the lock session ls ran the claim query name on
// its one generic plan (at least wantGeneric times, never a custom plan),
// and returns the plan PostgreSQL makes of that statement under the
// claim's settings on a connection of its own, as it would for a new
// session or after an invalidation.
func sessionPlan(t *testing.T, b *jobsBundle, ls *lockSession, name, when string, wantGeneric int64) string {
	t.Helper()
	var text string
	err := ls.do(func(ctx context.Context, conn *pgx.Conn, _ uint64) error {
		var generic, custom int64
		if err := conn.QueryRow(ctx, `SELECT statement, generic_plans, custom_plans
			FROM pg_prepared_statements WHERE statement LIKE '-- name: ' || $1::text || ' %'`, name).Scan(&text, &generic, &custom); err != nil {
			return fmt.Errorf("%s is not a prepared statement of the session: %w", name, err)
		}
		if custom != 0 || generic < wantGeneric {
			return fmt.Errorf("%s: %d generic and %d custom plans, want %d generic and no custom", name, generic, custom, wantGeneric)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	return genericPlan(t, b, text)
}

// genericPlan is the plan PostgreSQL makes of statement text, under
// ClaimPlanSettings, on a connection of its own (as it would for a new
// session, or after an invalidation), with random reads priced far above
// sequential ones, as no server is tuned: left to its costs, the planner
// then sorts every pending row for the claim.
func genericPlan(t *testing.T, b *jobsBundle, text string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL random_page_cost = 1000"); err != nil {
		t.Fatal(err)
	}
	if err := b.queries.ClaimPlanSettings(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "PREPARE one_plan AS "+text, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	var params int
	if err := tx.QueryRow(ctx, `SELECT cardinality(parameter_types) FROM pg_prepared_statements WHERE name = 'one_plan'`).Scan(&params); err != nil {
		t.Fatal(err)
	}
	nulls := strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")
	rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE one_plan("+nulls+")", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// The lock session's claim is a batch, which pgx sends in the connection's
// own mode: a pool configured for the simple protocol, or for unnamed
// statements, works its tasks as the default mode does.
func TestClaimUnderEveryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setupJobs(t)
			ctx := context.Background()
			cfg := b.pool.Config()
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool := pgtest.PoolFromConfig(t, cfg)
			tasks := make([]queue.NewTask, 300)
			for i := range tasks {
				tasks[i] = queue.NewTask{Name: "job", Payload: i}
			}
			if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
				t.Fatal(err)
			}
			var ran atomic.Int64
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- New(pool, Config{Logger: b.log}).Run(rctx, Handlers{"job": func(context.Context, *Task) error { ran.Add(1); return nil }})
			}()
			pgtest.Eventually(t, 10*time.Second, "300 tasks completed", func() bool {
				var n int
				if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks WHERE status = 'completed'`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n == 300
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if ran.Load() != 300 {
				t.Fatalf("%d handler calls, want 300", ran.Load())
			}
		})
	}
}

// A claim holds a task's advisory lock only for the rows it claims: a row
// it passes over for its exclusive key (not the first of its key in the
// batch) is not locked first and then left behind, on the plain claim and
// on the claim within a held block of a queue limit alike. A lock left so
// would keep the task from every other worker until the session ended.
func TestClaimLocksOnlyWhatItClaims(t *testing.T) {
	t.Parallel()
	for name, how := range map[string]claimHow{"plain": howPlain, "held": howHeld} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupJobs(t)
			ctx := context.Background()
			ls, p := openClaimSession(t, b)
			insert := func(sql string) {
				t.Helper()
				if _, err := b.pool.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			claim := func(how claimHow, want int) {
				t.Helper()
				rows, _, ran, err := ls.claim(p, how)
				if err != nil {
					t.Fatal(err)
				}
				if ran != how || len(rows) != want {
					t.Fatalf("claim as %v ran as %v and took %d rows, want %d", how, ran, len(rows), want)
				}
			}
			held := 0
			if how == howHeld {
				// A block of a limit far above what runs, taken by a first
				// claim of the queue's own.
				if err := b.client.SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: 1_000_000}); err != nil {
					t.Fatal(err)
				}
				insert(`INSERT INTO skiplock_tasks (name) VALUES ('job')`)
				claim(howQueue, 1)
				held = 1
			}
			insert(`INSERT INTO skiplock_tasks (name, exclusive_key) VALUES ('job', 'k'), ('job', 'k')`)
			insert(`INSERT INTO skiplock_tasks (name) VALUES ('job')`)
			claim(how, 2) // the first task of key k, and the task without a key
			var locks int
			err := ls.do(func(ctx context.Context, conn *pgx.Conn, _ uint64) error {
				return b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2
					AND classid = $1::oid AND pid = $2`, b.schema.TableOID, conn.PgConn().PID()).Scan(&locks)
			})
			if err != nil {
				t.Fatal(err)
			}
			if locks != held+2 {
				t.Fatalf("the lock session holds %d task locks, want %d: one per task it claimed", locks, held+2)
			}
		})
	}
}

// openClaimSession opens a lock session on b's schema, closed when the
// test ends, and the parameters of a claim of the default queue on it (10
// rows, any name, the limits' lock class set).
func openClaimSession(t *testing.T, b *jobsBundle) (*lockSession, db.TaskClaimParams) {
	t.Helper()
	ctx := context.Background()
	var limitClass int32
	if err := b.pool.QueryRow(ctx, "SELECT 'skiplock_limits'::regclass::oid::integer").Scan(&limitClass); err != nil {
		t.Fatal(err)
	}
	ls := newLockSession(b.pool.Config().ConnConfig, int32(uint32(b.schema.TableOID)), b.schema.TableOID, Config{}.sessionTuning(), b.log)
	if err := ls.connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.close)
	return ls, db.TaskClaimParams{WorkerID: "w", Queue: queue.DefaultQueue, LimitClass: limitClass, OnlyNames: []string{},
		SkipNames: []string{}, OnlyIds: []int64{}, ExclusiveSeed: b.schema.TableOID, Max: 10}
}
