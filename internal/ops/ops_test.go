package ops_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// insert adds a task in any state, as a worker would have left it, and
// returns its ID. errs is the error history as JSON.
func insert(t *testing.T, pool *pgxpool.Pool, queueName, name string, status queue.Status, attempt, maxAttempts int, errs string) int64 {
	t.Helper()
	return pgtest.InsertTask(t, pool, queueName, name, string(status), attempt, maxAttempts, errs)
}

func failedHistory(msg string) string {
	return fmt.Sprintf(`[{"attempt":1,"outcome":"error","error":%q,"worker_id":"w1","host":"h","pid":7,
		"started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z"}]`, msg)
}

func TestLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t, true)
	pool := pgtest.NewPool(t, schema)
	c := queue.New(pool)
	id := insert(t, pool, "q", "held", queue.StatusRunning, 1, 3, `[]`)
	free := insert(t, pool, "q", "orphan", queue.StatusRunning, 1, 3, `[]`)
	// The task locks' class: skiplock_tasks' OID.
	var tableOID int64
	if err := pool.QueryRow(ctx, "SELECT 'skiplock_tasks'::regclass::oid::bigint").Scan(&tableOID); err != nil {
		t.Fatal(err)
	}

	// A session holds the task's lock as a worker does, and registers as one.
	cfg := pgtest.Config(t, schema).ConnConfig
	cfg.RuntimeParams["application_name"] = "locktest-worker"
	holder, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	var pid int
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1::integer, $2::integer)", int32(uint32(tableOID)), int32(id)); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `INSERT INTO skiplock_workers (id, host, pid, queues, lock_backend_pid) VALUES ('w1', 'box', 4242, '{q}', $1)`, pid); err != nil {
		t.Fatal(err)
	}

	locks, err := ops.Locks(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 {
		t.Fatalf("locks = %+v, want one", locks)
	}
	l := locks[0]
	if l.TaskID != id || l.Name != "held" || l.PID != pid || l.ApplicationName != "locktest-worker" ||
		l.WorkerID != "w1" || l.WorkerHost != "box" || l.WorkerPID != 4242 || l.HeldFor < 59*time.Second || l.TaskWorkerID != "w1" {
		t.Fatalf("lock = %+v", l)
	}
	if h, err := ops.LockHolder(ctx, c, id); err != nil || h == nil || h.PID != pid {
		t.Fatalf("LockHolder(%d) = %+v, %v", id, h, err)
	}
	if h, err := ops.LockHolder(ctx, c, free); err != nil || h != nil {
		t.Fatalf("LockHolder(%d) = %+v, %v; want nobody", free, h, err)
	}

	// A transaction holds the task row; another waits for it.
	tx := pgtest.HoldTaskRow(t, holder, free)
	waiter, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Release()
	var waiterPID int
	if err := waiter.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&waiterPID); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(ctx, "UPDATE skiplock_tasks SET priority = 1 WHERE id = $1", free)
		waited <- err
	}()
	pgtest.Eventually(t, time.Second, fmt.Sprintf("session %d to show as waiting", waiterPID), func() bool {
		waits, err := ops.LockWaits(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(waits, func(w ops.LockWait) bool { return w.PID == waiterPID })
		if i >= 0 {
			if w := waits[i]; !slices.Contains(w.BlockedBy, pid) || !strings.Contains(w.Query, "UPDATE skiplock_tasks") {
				t.Fatalf("wait = %+v, want blocked by %d", w, pid)
			}
		}
		return i >= 0
	})
	// The holder lets go, and the waiting UPDATE goes through.
	if err := errors.Join(tx.Rollback(ctx), <-waited); err != nil {
		t.Fatal(err)
	}
}

// TestThroughput counts finished tasks per queue, status and bucket.
func TestThroughput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	for range 2 {
		insert(t, pool, "a", "n", queue.StatusCompleted, 1, 1, `[]`)
	}
	insert(t, pool, "a", "n", queue.StatusFailed, 1, 1, `[]`)
	insert(t, pool, "b", "n", queue.StatusCompleted, 1, 1, `[]`)
	insert(t, pool, "b", "n", queue.StatusCancelled, 1, 1, `[]`)
	insert(t, pool, "b", "n", queue.StatusPending, 0, 1, `[]`)
	// One bucket of a day holds every task that just finished.
	got, err := ops.Throughput(ctx, c, time.Now().Add(-time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := []ops.FinishedCount{
		{Queue: "a", Status: queue.StatusCompleted, Bucket: 0, Count: 2},
		{Queue: "a", Status: queue.StatusFailed, Bucket: 0, Count: 1},
		{Queue: "b", Status: queue.StatusCompleted, Bucket: 0, Count: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Throughput = %+v, want %+v", got, want)
	}
}

// TestCount counts what List and Requeue select: the same filter, a
// sequence, and none of a filter List refuses.
func TestCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	for range 7 {
		insert(t, pool, "mail", "send", queue.StatusFailed, 2, 2, failedHistory("dial: i/o TIMEOUT"))
	}
	insert(t, pool, "mail", "send", queue.StatusFailed, 2, 2, failedHistory("bad address")) // error differs
	insert(t, pool, "mail", "bounce", queue.StatusFailed, 2, 2, failedHistory("timeout"))   // name differs
	insert(t, pool, "reports", "send", queue.StatusFailed, 2, 2, failedHistory("timeout"))  // queue differs
	insert(t, pool, "mail", "send", queue.StatusCancelled, 1, 2, failedHistory("timeout"))  // status differs
	insert(t, pool, "mail", "send", queue.StatusRunning, 1, 2, failedHistory("timeout"))    // running
	old := insert(t, pool, "mail", "send", queue.StatusFailed, 2, 2, failedHistory("timeout earlier"))
	if _, err := pool.Exec(ctx, "UPDATE skiplock_tasks SET finished_at = now() - interval '3 days' WHERE id = $1", old); err != nil {
		t.Fatal(err)
	}

	f := queue.Filter{Statuses: []queue.Status{queue.StatusFailed}, Queues: []string{"mail"},
		Names: []string{"send"}, ErrorContains: "timeout", Since: time.Now().Add(-time.Hour)}
	if n, err := ops.Count(ctx, c, f); err != nil || n != 7 {
		t.Fatalf("Count = %d, %v; want 7", n, err)
	}
	if n, err := ops.Count(ctx, c, queue.Filter{}); err != nil || n != 13 {
		t.Fatalf("Count of every task = %d, %v; want 13", n, err)
	}

	for i := range 3 {
		if _, err := c.Enqueue(ctx, "post", i, queue.WithSequence("account:2")); err != nil {
			t.Fatal(err)
		}
	}
	seq := queue.Filter{Sequence: "account:2"}
	if n, err := ops.Count(ctx, c, seq); err != nil || n != 3 {
		t.Fatalf("Count(Sequence) = %d, %v; want 3", n, err)
	}
	// Only the sequence's head is pending; the others wait for it.
	seq.Statuses = []queue.Status{queue.StatusPending}
	if n, err := ops.Count(ctx, c, seq); err != nil || n != 1 {
		t.Fatalf("Count(Sequence, pending) = %d, %v; want 1", n, err)
	}

	bad := queue.Filter{Sequence: strings.Repeat("k", queue.MaxKeyLength+1)}
	_, err := ops.Count(ctx, c, bad)
	if _, lerr := c.List(ctx, bad, queue.Page{}); !errors.Is(err, queue.ErrInvalidRequest) || lerr == nil || err.Error() != lerr.Error() {
		t.Fatalf("Count(long sequence) = %v, List's = %v; want List's ErrInvalidRequest", err, lerr)
	}
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := queue.New(pgtest.Pool(t))
	_, err1 := ops.Throughput(ctx, c, time.Now(), 0)
	_, err2 := ops.LockHolder(ctx, c, 0)
	for i, err := range []error{err1, err2} {
		if !errors.Is(err, queue.ErrInvalidRequest) {
			t.Errorf("call %d: err = %v, want ErrInvalidRequest", i+1, err)
		}
	}
}

func TestNotMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := queue.New(pgtest.NewPool(t, pgtest.Schema(t, false)))
	_, err1 := ops.Locks(ctx, c)
	_, err2 := ops.Schema(ctx, c)
	_, err3 := ops.Count(ctx, c, queue.Filter{})
	_, _, err4 := ops.Workers(ctx, c)
	_, err5 := ops.Queues(ctx, c)
	for i, err := range []error{err1, err2, err3, err4, err5} {
		if !errors.Is(err, migrations.ErrNotMigrated) {
			t.Errorf("call %d: err = %v, want ErrNotMigrated", i+1, err)
		}
	}
}
