package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// statuses reads the status of each task, in the order given.
func statuses(t *testing.T, pool *pgxpool.Pool, ids ...int64) string {
	t.Helper()
	out := make([]string, len(ids))
	for i, id := range ids {
		if err := pool.QueryRow(context.Background(), "SELECT status FROM skiplock_tasks WHERE id = $1", id).Scan(&out[i]); err != nil {
			t.Fatalf("task %d: %v", id, err)
		}
	}
	return strings.Join(out, " ")
}

func setStatus(t *testing.T, pool *pgxpool.Pool, status string, id int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patient(time.Second))
	defer cancel()
	if _, err := pool.Exec(ctx, "UPDATE skiplock_tasks SET status = $1, finished_at = now() WHERE id = $2", status, id); err != nil {
		t.Fatalf("task %d to %s: %v", id, status, err)
	}
}

// The first task of a key is pending, every later one waits; a task that
// leaves the key releases the next, whichever way it leaves; keys are
// independent; tasks without a key are untouched.
func TestSequenceEnqueueAndRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	a1, err := c.Enqueue(ctx, "sync", 1, queue.WithSequence("account:1"))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := c.EnqueueTx(ctx, tx, "sync", 2, queue.WithSequence("account:1"), queue.WithSequenceHold())
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Mixed keys and none in one batch: B's first is pending, its second
	// waits behind it; A's waits behind a1.
	ids, err := c.EnqueueMany(ctx, []queue.NewTask{
		{Name: "sync", Payload: 3, Options: []queue.Option{queue.WithSequence("account:2")}},
		{Name: "plain", Payload: 4},
		{Name: "sync", Payload: 5, Options: []queue.Option{queue.WithSequence("account:1")}},
		{Name: "sync", Payload: 6, Options: []queue.Option{queue.WithSequence("account:2")}},
		{Name: "plain", Payload: 7, Options: []queue.Option{queue.WithExclusiveKey("account:2")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	b1, plain, a3, b2, plain2 := ids[0], ids[1], ids[2], ids[3], ids[4]
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ids out of input order: %v", ids)
		}
	}
	if got := statuses(t, pool, a1, a2, a3, b1, b2, plain, plain2); got != "pending waiting waiting pending waiting pending pending" {
		t.Fatalf("after enqueue: %s", got)
	}
	if n := count(t, pool, "sequence_key IS NULL AND sequence_hold IS NULL"); n != 2 {
		t.Fatalf("%d plain tasks have the new columns NULL, want 2", n)
	}
	task := get(t, c, a2)
	if task.SequenceKey != "account:1" || !task.SequenceHold || task.Status != queue.StatusWaiting ||
		!strings.Contains(task.Why(time.Now()), `its turn in sequence "account:1"`) {
		t.Fatalf("a2 = %+v, why %q", task, task.Why(time.Now()))
	}

	setStatus(t, pool, "completed", a1)
	if got := statuses(t, pool, a1, a2, a3); got != "completed pending waiting" {
		t.Fatalf("after a1 completed: %s", got)
	}
	// a2 holds: failed for good, a3 keeps waiting.
	setStatus(t, pool, "running", a2)
	setStatus(t, pool, "failed", a2)
	if got := statuses(t, pool, a2, a3); got != "failed waiting" {
		t.Fatalf("after a2 failed with hold: %s", got)
	}
	// Requeued, it is the head again, ahead of a3.
	res, err := c.Requeue(ctx, queue.RequeueRequest{IDs: []int64{a2}})
	if err != nil || res.Changed != 1 {
		t.Fatalf("requeue: %+v, %v", res, err)
	}
	if got := statuses(t, pool, a2, a3); got != "pending waiting" {
		t.Fatalf("after a2 requeued: %s", got)
	}
	// Failed again, then cancelled: a3 goes.
	setStatus(t, pool, "failed", a2)
	if _, err := c.Cancel(ctx, queue.CancelRequest{IDs: []int64{a2}}); err != nil {
		t.Fatal(err)
	}
	if got := statuses(t, pool, a2, a3); got != "cancelled pending" {
		t.Fatalf("after a2 cancelled: %s", got)
	}
	// Requeueing a2 now, with a3 pending, must not make two pending: it
	// waits, and runs after a3 (ahead of later tasks: it has the lower id).
	a4, err := c.Enqueue(ctx, "sync", 8, queue.WithSequence("account:1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Requeue(ctx, queue.RequeueRequest{IDs: []int64{a2}, Filter: queue.Filter{Statuses: []queue.Status{queue.StatusCancelled}}}); err != nil {
		t.Fatal(err)
	}
	if got := statuses(t, pool, a2, a3, a4); got != "waiting pending waiting" {
		t.Fatalf("after a2 requeued behind a3: %s", got)
	}
	setStatus(t, pool, "completed", a3)
	if got := statuses(t, pool, a2, a3, a4); got != "pending completed waiting" {
		t.Fatalf("after a3 completed: %s", got)
	}
	// Deleting the head releases the next.
	if _, err := c.Delete(ctx, []int64{a2}); err != nil {
		t.Fatal(err)
	}
	if got := statuses(t, pool, a4); got != "pending" {
		t.Fatalf("after a2 deleted: %s", got)
	}

	// Without hold, a failure for good lets the next one go.
	setStatus(t, pool, "failed", b1)
	if got := statuses(t, pool, b1, b2); got != "failed pending" {
		t.Fatalf("after b1 failed without hold: %s", got)
	}

	seq, err := c.GetSequence(ctx, "account:1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range seq.Tasks {
		got = append(got, fmt.Sprintf("%s:%s", tk.Payload, tk.Status))
	}
	if strings.Join(got, " ") != "1:completed 5:completed 8:pending" || seq.Head != a4 ||
		seq.Counts[queue.StatusCompleted] != 2 || seq.Counts[queue.StatusPending] != 1 {
		t.Fatalf("GetSequence = %v, head %d, counts %v", got, seq.Head, seq.Counts)
	}
	listed, err := c.List(ctx, queue.ListFilter{Sequence: "account:2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 || listed[0].ID != b2 || listed[1].ID != b1 {
		t.Fatalf("List(Sequence) = %v", listed)
	}
}

func TestSequenceInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	for _, tc := range []struct {
		opts []queue.Option
		want string
	}{
		{[]queue.Option{queue.WithSequence("")}, "sequence key is empty"},
		{[]queue.Option{queue.WithSequence(strings.Repeat("k", 1025))}, "sequence key is 1,025 bytes, over the 1,024-byte limit (queue.MaxKeyLength)"},
		{[]queue.Option{queue.WithSequenceHold()}, "WithSequenceHold needs WithSequence"},
		{[]queue.Option{queue.WithSequence("k"), queue.WithDependsOn(1)}, "cannot be combined with WithDependsOn"},
		{[]queue.Option{queue.WithSequence("k"), queue.WithUniqueKey("u")}, "cannot be combined with a unique key"},
		{[]queue.Option{queue.WithSequence("k"), queue.WithUnique()}, "cannot be combined with a unique key"},
	} {
		_, err := c.Enqueue(ctx, "t", nil, tc.opts...)
		if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Enqueue: %v, want ErrInvalidTask with %q", err, tc.want)
		}
		_, err = c.EnqueueMany(ctx, []queue.NewTask{{Name: "ok"}, {Name: "t", Options: tc.opts}})
		if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("EnqueueMany: %v, want ErrInvalidTask with %q", err, tc.want)
		}
	}
	_, err := c.EnqueueWorkflow(ctx, queue.Workflow{Steps: []queue.Step{{Name: "a", Options: []queue.Option{queue.WithSequence("k")}}}})
	if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), "WithSequence does not apply to a step") {
		t.Errorf("EnqueueWorkflow: %v", err)
	}
	if n := count(t, pool, "true"); n != 0 {
		t.Fatalf("%d tasks inserted by invalid enqueues", n)
	}
	// A unique key within a window is fine: its index covers every status.
	if _, err := c.Enqueue(ctx, "t", nil, queue.WithSequence("k"), queue.WithUniqueKey("u"), queue.WithUniqueWindow(time.Hour)); err != nil {
		t.Fatal(err)
	}

	// Outside READ COMMITTED the check could miss a producer's commit.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := c.EnqueueTx(ctx, tx, "t", nil, queue.WithSequence("k")); err == nil || !strings.Contains(err.Error(), "READ COMMITTED") {
		t.Errorf("EnqueueTx in REPEATABLE READ: %v", err)
	}

	if _, err := c.GetSequence(ctx, "nope"); !errors.Is(err, queue.ErrSequenceNotFound) {
		t.Errorf("GetSequence(unknown) = %v", err)
	}
	if _, err := c.GetSequence(ctx, ""); !errors.Is(err, queue.ErrInvalidRequest) {
		t.Errorf("GetSequence(\"\") = %v", err)
	}
	if _, err := c.List(ctx, queue.ListFilter{Sequence: strings.Repeat("k", 1025)}); !errors.Is(err, queue.ErrInvalidRequest) {
		t.Errorf("List(long sequence) = %v", err)
	}
}

// Producers of one key on separate pools, each holding its transaction
// open a moment after enqueueing, in every mix of Enqueue, EnqueueTx and
// EnqueueMany: the key's lock serializes them, so exactly one task of the
// key is pending, whatever the interleaving; rolled-back ones leave nothing.
func TestSequenceConcurrentProducers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t, true)
	pool := pgtest.NewPool(t, schema)

	const producers, each = 6, 10
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	start := make(chan struct{})
	for p := range producers {
		ppool := pgtest.NewPool(t, schema)
		c := queue.New(ppool)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range each {
				opt := queue.WithSequence("shared")
				var err error
				switch (p + i) % 4 {
				case 0:
					_, err = c.Enqueue(ctx, "t", i, opt)
				case 1:
					_, err = c.EnqueueMany(ctx, []queue.NewTask{{Name: "t", Payload: i, Options: []queue.Option{opt}},
						{Name: "t", Payload: i, Options: []queue.Option{queue.WithSequence(fmt.Sprintf("own:%d", p))}}})
				default:
					err = pgx.BeginFunc(ctx, ppool, func(tx pgx.Tx) error {
						if _, err := c.EnqueueTx(ctx, tx, "t", i, opt); err != nil {
							return err
						}
						// Keep the lock while others try.
						if _, err := tx.Exec(ctx, "SELECT pg_sleep(0.005)"); err != nil {
							return err
						}
						if (p+i)%4 == 3 {
							return errRollback
						}
						return nil
					})
					if errors.Is(err, errRollback) {
						err = nil
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := count(t, pool, "sequence_key = 'shared' AND status = 'pending'"); n != 1 {
		t.Fatalf("%d tasks of the key pending, want 1", n)
	}
	var total, first int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'pending' AND id = (SELECT min(id) FROM skiplock_tasks WHERE sequence_key = 'shared'))
		FROM skiplock_tasks WHERE sequence_key = 'shared'`).Scan(&total, &first); err != nil {
		t.Fatal(err)
	}
	committed := 0
	for p := range producers {
		for i := range each {
			if (p+i)%4 != 3 {
				committed++
			}
		}
	}
	if total != committed {
		t.Fatalf("%d tasks of the key, want %d (the committed ones)", total, committed)
	}
	if first != 1 {
		t.Errorf("the pending task is not the key's first")
	}
	// Releasing one at a time, they come out one pending at a time, in id order.
	var prev int64
	for range total {
		var id int64
		if err := pool.QueryRow(ctx, "SELECT id FROM skiplock_tasks WHERE sequence_key = 'shared' AND status = 'pending'").Scan(&id); err != nil {
			t.Fatalf("after %d: %v", prev, err)
		}
		if id <= prev {
			t.Fatalf("released %d after %d", id, prev)
		}
		prev = id
		setStatus(t, pool, "completed", id)
		if n := count(t, pool, "sequence_key = 'shared' AND status = 'pending'"); n > 1 {
			t.Fatalf("%d pending after completing %d", n, id)
		}
	}
	if n := count(t, pool, "sequence_key = 'shared' AND status <> 'completed'"); n != 0 {
		t.Fatalf("%d tasks of the key left", n)
	}
}

var errRollback = errors.New("roll back")

// The SQL producers take a sequence key too; calls written for migration
// 6 work unchanged.
func TestSequenceFromSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var a, b, c int64
	if err := pool.QueryRow(ctx, `SELECT skiplock_enqueue('t', '1', sequence_key => 'k')`).Scan(&a); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT skiplock_enqueue('t', '2', 'default', NULL, 0, 25, NULL, NULL, NULL, '{}', 'k', true)`).Scan(&b); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT id FROM skiplock_enqueue_many('[{"name": "t", "sequence_key": "k"}, {"name": "old", "unique_key": "u"}]') WHERE ord = 1`).Scan(&c); err != nil {
		t.Fatal(err)
	}
	if got := statuses(t, pool, a, b, c); got != "pending waiting waiting" {
		t.Fatalf("statuses %s", got)
	}
	if n := count(t, pool, "sequence_hold"); n != 1 {
		t.Fatalf("%d tasks hold, want 1", n)
	}
	for sql, want := range map[string]string{
		`SELECT skiplock_enqueue('t', sequence_key => 'k', unique_key => 'u2')`:        "cannot be combined with unique_key",
		`SELECT skiplock_enqueue('t', sequence_hold => true)`:                          "sequence_hold needs a sequence_key",
		`SELECT skiplock_enqueue('t', sequence_key => repeat('k', 1025))`:              "sequence key is 1,025 bytes, over the 1,024-byte limit",
		`SELECT * FROM skiplock_enqueue_many('[{"name": "t", "sequence_hold": "x"}]')`: "invalid task 1",
	} {
		if _, err := pool.Exec(ctx, sql); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", sql, err, want)
		}
	}
}

// Failed tasks of one key requeued together, by ID or by filter: one
// becomes pending, the first; the others wait behind it.
func TestSequenceRequeueTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	for _, byID := range []bool{true, false} {
		key := fmt.Sprintf("k-%v", byID)
		var ids []int64
		for n := range 4 {
			id, err := c.Enqueue(ctx, "t", n, queue.WithSequence(key))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for _, id := range ids[:3] { // each fails for good in turn, without hold
			setStatus(t, pool, "failed", id)
		}
		if got := statuses(t, pool, ids...); got != "failed failed failed pending" {
			t.Fatalf("before requeue: %s", got)
		}
		setStatus(t, pool, "completed", ids[3])
		var err error
		if byID {
			_, err = c.Requeue(ctx, queue.RequeueRequest{IDs: ids[:3]})
		} else {
			_, err = c.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{Names: []string{"t"}}, BatchSize: 2})
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := statuses(t, pool, ids[:3]...); got != "pending waiting waiting" {
			t.Fatalf("requeued (by ID %v): %s", byID, got)
		}
	}
}

// The checks and the release read indexes, not the table: on a table of
// 50,000 tasks, completing a head (the trigger's release), enqueueing
// behind it and requeueing a task of its key scan no table. A release
// that compared keys under another collation than the column's, for one,
// would read the whole table on every completion.
func TestSequenceReadsIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	for _, q := range []string{
		`INSERT INTO skiplock_tasks (name) SELECT 'plain' FROM generate_series(1, 40000)`,
		`INSERT INTO skiplock_tasks (name, sequence_key, status) SELECT 't', 'k' || (i % 20), CASE WHEN i < 20 THEN 'pending' ELSE 'waiting' END
		 FROM generate_series(0, 9999) AS i`,
		`INSERT INTO skiplock_tasks (name, sequence_key, status, finished_at) SELECT 't', 'k1', 'failed', now() FROM generate_series(1, 3)`,
		`ANALYZE skiplock_tasks`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var head, failed int64
	if err := pool.QueryRow(ctx, `SELECT min(id) FILTER (WHERE status = 'pending'), min(id) FILTER (WHERE status = 'failed')
		FROM skiplock_tasks WHERE sequence_key = 'k1'`).Scan(&head, &failed); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "UPDATE skiplock_tasks SET status = 'completed' WHERE id = $1", head); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueTx(ctx, tx, "t", nil, queue.WithSequence("k1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RequeueTx(ctx, tx, queue.RequeueRequest{IDs: []int64{failed}}); err != nil {
		t.Fatal(err)
	}
	var seqScans, released int64
	if err := tx.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_xact_user_tables
		WHERE relid = 'skiplock_tasks'::regclass`).Scan(&seqScans); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks WHERE sequence_key = 'k1' AND status = 'pending'`).Scan(&released); err != nil {
		t.Fatal(err)
	}
	if released != 1 {
		t.Fatalf("%d tasks of k1 pending after the head completed, want 1", released)
	}
	if seqScans != 0 {
		t.Fatalf("%d scans of the whole table", seqScans)
	}
}
