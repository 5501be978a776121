package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

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

func get(t *testing.T, c *queue.Client, id int64) *queue.Task {
	t.Helper()
	task, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func TestRequeueByID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	failed := insert(t, pool, "mail", "send", queue.StatusFailed, 3, 3, failedHistory("smtp down"))
	cancelled := insert(t, pool, "mail", "send", queue.StatusCancelled, 1, 3, `[]`)
	running := insert(t, pool, "mail", "send", queue.StatusRunning, 1, 3, `[]`)
	completed := insert(t, pool, "mail", "send", queue.StatusCompleted, 1, 3, `[]`)
	pending := insert(t, pool, "mail", "send", queue.StatusPending, 0, 3, `[]`)

	res, err := c.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{IDs: []int64{completed, failed, running, cancelled, pending, 999999, failed}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != 1 || !slices.Equal(res.IDs, []int64{failed}) {
		t.Fatalf("requeued %d %v, want only %d", res.Changed, res.IDs, failed)
	}
	wantSkipped := []queue.SkippedTask{
		{ID: cancelled, Status: queue.StatusCancelled}, {ID: running, Status: queue.StatusRunning},
		{ID: completed, Status: queue.StatusCompleted}, {ID: pending, Status: queue.StatusPending},
		{ID: 999999},
	}
	if !slices.Equal(res.Skipped, wantSkipped) {
		t.Fatalf("skipped %+v, want %+v", res.Skipped, wantSkipped)
	}

	// Out of attempts: it keeps its count and gets one more.
	task := get(t, c, failed)
	if task.Status != queue.StatusPending || task.Attempt != 3 || task.MaxAttempts != 4 ||
		task.FinishedAt != nil || task.WorkerID != "" || time.Since(task.RunAt) > time.Minute || time.Until(task.RunAt) > 0 {
		t.Fatalf("requeued task = %+v", task)
	}
	if len(task.Errors) != 2 || task.Errors[0].Error != "smtp down" {
		t.Fatalf("history not kept: %+v", task.Errors)
	}
	if e := task.Errors[1]; e.Outcome != "requeued" || e.Attempt != 3 || e.Error != "requeued" || e.FinishedAt.IsZero() {
		t.Fatalf("requeue entry = %+v", e)
	}
	if s := get(t, c, running).Status; s != queue.StatusRunning {
		t.Fatalf("running task became %s", s)
	}

	// Cancelled tasks when asked, with attempts reset.
	res, err = c.Requeue(ctx, queue.RequeueRequest{
		Filter:        queue.Filter{IDs: []int64{cancelled}, Statuses: []queue.Status{queue.StatusFailed, queue.StatusCancelled}},
		ResetAttempts: true, Reason: "by test",
	})
	if err != nil || res.Changed != 1 || len(res.Skipped) != 0 {
		t.Fatalf("requeue cancelled: %+v, %v", res, err)
	}
	task = get(t, c, cancelled)
	if task.Status != queue.StatusPending || task.Attempt != 0 || task.MaxAttempts != 3 || task.Errors[0].Error != "by test" {
		t.Fatalf("reset task = %+v", task)
	}
}

func TestRequeueFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	var mailTimeouts []int64
	for range 7 {
		mailTimeouts = append(mailTimeouts, insert(t, pool, "mail", "send", queue.StatusFailed, 2, 2, failedHistory("dial: i/o TIMEOUT")))
	}
	other := []int64{
		insert(t, pool, "mail", "send", queue.StatusFailed, 2, 2, failedHistory("bad address")),     // error differs
		insert(t, pool, "mail", "bounce", queue.StatusFailed, 2, 2, failedHistory("timeout")),       // name differs
		insert(t, pool, "reports", "send", queue.StatusFailed, 2, 2, failedHistory("timeout")),      // queue differs
		insert(t, pool, "mail", "send", queue.StatusCancelled, 1, 2, failedHistory("timeout")),      // status differs
		insert(t, pool, "mail", "send", queue.StatusRunning, 1, 2, failedHistory("timeout")),        // running
		insert(t, pool, "mail", "send", queue.StatusFailed, 2, 2, failedHistory("timeout earlier")), // finished too long ago
	}
	if _, err := pool.Exec(ctx, "UPDATE skiplock_tasks SET finished_at = now() - interval '3 days' WHERE id = $1", other[5]); err != nil {
		t.Fatal(err)
	}

	f := queue.Filter{Queues: []string{"mail"}, Names: []string{"send"}, ErrorContains: "timeout", Since: time.Now().Add(-time.Hour)}
	var calls []int64
	res, err := c.Requeue(ctx, queue.RequeueRequest{Filter: f, BatchSize: 3, Progress: func(n int64) { calls = append(calls, n) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != 7 || res.IDs != nil || res.Skipped != nil {
		t.Fatalf("result = %+v", res)
	}
	if !slices.Equal(calls, []int64{3, 6, 7}) {
		t.Fatalf("progress calls %v, want [3 6 7]", calls)
	}
	for _, id := range mailTimeouts {
		if s := get(t, c, id).Status; s != queue.StatusPending {
			t.Fatalf("task %d is %s", id, s)
		}
	}
	for _, id := range other {
		if s := get(t, c, id).Status; s == queue.StatusPending {
			t.Fatalf("task %d (not matching) was requeued", id)
		}
	}
}

func TestRequeueWakesWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t, true)
	pool := pgtest.NewPool(t, schema)
	c := queue.New(pool)
	id := insert(t, pool, "mail", "send", queue.StatusFailed, 1, 1, `[]`)
	insert(t, pool, "reports", "build", queue.StatusFailed, 1, 1, `[]`)

	conn, err := pgx.ConnectConfig(ctx, pgtest.Config(t, schema).ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{workChannel(schema)}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	if _, err := c.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{IDs: []int64{id}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{Queues: []string{"reports"}}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for notifications (got %v): %v", got, err)
		}
		got = append(got, n.Payload)
	}
	if !slices.Equal(got, []string{"mail", "reports"}) {
		t.Fatalf("notified %v, want [mail reports]", got)
	}
}

// TestRequeueBulk requeues 100,000 failed tasks in batches, as an operator
// would after an outage.
func TestRequeueBulk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	const total = 100000
	_, err := pool.Exec(ctx, `
		INSERT INTO skiplock_tasks (queue, name, status, attempt, max_attempts, finished_at, errors)
		SELECT 'bulk', 'import', 'failed', 5, 5, now(),
		       jsonb_build_array(jsonb_build_object('attempt', 5, 'outcome', 'error', 'error', 'upstream 503'))
		FROM generate_series(1, $1::int)`, total)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	var last atomic.Int64
	start := time.Now()
	res, err := c.Requeue(ctx, queue.RequeueRequest{
		Filter:   queue.Filter{Queues: []string{"bulk"}, ErrorContains: "503"},
		Progress: func(n int64) { calls.Add(1); last.Store(n) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("requeued %d tasks in %s", res.Changed, time.Since(start).Round(time.Millisecond))
	if res.Changed != total || last.Load() != total {
		t.Fatalf("requeued %d (progress said %d), want %d", res.Changed, last.Load(), total)
	}
	if want := int64(total / 5000); calls.Load() != want {
		t.Fatalf("%d progress calls, want %d (one per batch)", calls.Load(), want)
	}
	if n := count(t, pool, "status = 'pending' AND attempt = 5 AND max_attempts = 6 AND jsonb_array_length(errors) = 2"); n != total {
		t.Fatalf("%d tasks pending with one more attempt, want %d", n, total)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	pending := insert(t, pool, "q", "a", queue.StatusPending, 0, 3, `[]`)
	failed := insert(t, pool, "q", "a", queue.StatusFailed, 3, 3, `[]`)
	running := insert(t, pool, "q", "a", queue.StatusRunning, 1, 3, `[]`)
	completed := insert(t, pool, "q", "a", queue.StatusCompleted, 1, 3, `[]`)
	res, err := c.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{IDs: []int64{running, failed, pending, completed, 424242}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.IDs, []int64{pending, failed}) || res.Changed != 2 {
		t.Fatalf("cancelled %v", res.IDs)
	}
	want := []queue.SkippedTask{{ID: running, Status: queue.StatusRunning}, {ID: completed, Status: queue.StatusCompleted}, {ID: 424242}}
	if !slices.Equal(res.Skipped, want) {
		t.Fatalf("skipped %+v, want %+v", res.Skipped, want)
	}
	if task := get(t, c, pending); task.Status != queue.StatusCancelled || task.FinishedAt == nil {
		t.Fatalf("cancelled task = %+v", task)
	}

	// By filter, in batches: only pending tasks of queue "bulk".
	for range 5 {
		insert(t, pool, "bulk", "b", queue.StatusPending, 0, 3, `[]`)
	}
	keep := insert(t, pool, "bulk", "b", queue.StatusFailed, 3, 3, `[]`)
	var calls int
	res, err = c.Cancel(ctx, queue.CancelRequest{
		Filter:    queue.Filter{Statuses: []queue.Status{queue.StatusPending}, Queues: []string{"bulk"}},
		BatchSize: 2, Progress: func(int64) { calls++ },
	})
	if err != nil || res.Changed != 5 || calls != 3 {
		t.Fatalf("cancel by filter: %+v, %d calls, %v", res, calls, err)
	}
	if s := get(t, c, keep).Status; s != queue.StatusFailed {
		t.Fatalf("failed task outside the filter became %s", s)
	}
	if s := get(t, c, running).Status; s != queue.StatusRunning {
		t.Fatalf("running task became %s", s)
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	for _, s := range []queue.Status{queue.StatusCompleted, queue.StatusFailed, queue.StatusCancelled} {
		for range 4 {
			insert(t, pool, "q", "old", s, 1, 1, `[]`)
		}
	}
	if _, err := pool.Exec(ctx, "UPDATE skiplock_tasks SET finished_at = now() - interval '10 days'"); err != nil {
		t.Fatal(err)
	}
	recent := insert(t, pool, "q", "new", queue.StatusCompleted, 1, 1, `[]`)
	pending := insert(t, pool, "q", "new", queue.StatusPending, 0, 1, `[]`)
	running := insert(t, pool, "q", "new", queue.StatusRunning, 1, 1, `[]`)
	before := time.Now().Add(-7 * 24 * time.Hour)

	// Completed only first, then the rest.
	res, err := c.Purge(ctx, queue.PurgeRequest{Filter: queue.Filter{FinishedBefore: before, Statuses: []queue.Status{queue.StatusCompleted}}})
	if err != nil || res.Changed != 4 || res.IDs != nil || res.Skipped != nil {
		t.Fatalf("purge completed: %+v, %v", res, err)
	}
	var calls []int64
	res, err = c.Purge(ctx, queue.PurgeRequest{Filter: queue.Filter{FinishedBefore: before}, BatchSize: 3, Progress: func(n int64) { calls = append(calls, n) }})
	if err != nil || res.Changed != 8 || !slices.Equal(calls, []int64{3, 6, 8}) {
		t.Fatalf("purge: %d, calls %v, %v", res.Changed, calls, err)
	}
	if left := count(t, pool, "true"); left != 3 {
		t.Fatalf("%d tasks left, want 3", left)
	}
	for _, id := range []int64{recent, pending, running} {
		get(t, c, id)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	var ids []int64
	for i := range 12 {
		st := []queue.Status{queue.StatusPending, queue.StatusFailed, queue.StatusCompleted}[i%3]
		ids = append(ids, insert(t, pool, fmt.Sprint("q", i%2), "n", st, 1, 3, failedHistory(fmt.Sprint("err ", i))))
	}
	all, err := c.List(ctx, queue.Filter{}, queue.Page{})
	if err != nil || len(all) != 12 || all[0].ID != ids[11] {
		t.Fatalf("List all: %d tasks, %v", len(all), err)
	}
	page, err := c.List(ctx, queue.Filter{}, queue.Page{Limit: 5, BeforeID: ids[6]})
	if err != nil || len(page) != 5 || page[0].ID != ids[5] || page[4].ID != ids[1] {
		t.Fatalf("page = %v, %v", page, err)
	}
	failed, err := c.List(ctx, queue.Filter{Statuses: []queue.Status{queue.StatusFailed}, Queues: []string{"q1"}}, queue.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, task := range failed {
		got = append(got, task.ID)
	}
	if !slices.Equal(got, []int64{ids[7], ids[1]}) {
		t.Fatalf("failed in q1 = %v, want %v", got, []int64{ids[7], ids[1]})
	}
	byErr, err := c.List(ctx, queue.Filter{ErrorContains: "ERR 10"}, queue.Page{})
	if err != nil || len(byErr) != 1 || byErr[0].ID != ids[10] {
		t.Fatalf("by error: %v, %v", byErr, err)
	}
	byID, err := c.List(ctx, queue.Filter{IDs: []int64{ids[3], ids[4]}}, queue.Page{})
	if err != nil || len(byID) != 2 {
		t.Fatalf("by ID: %v, %v", byID, err)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	for range 3 {
		insert(t, pool, "a", "n", queue.StatusCompleted, 1, 1, `[]`)
	}
	insert(t, pool, "a", "n", queue.StatusFailed, 1, 1, `[]`)
	insert(t, pool, "a", "n", queue.StatusRunning, 1, 1, `[]`)
	insert(t, pool, "a", "n", queue.StatusWaiting, 0, 1, `[]`)
	due := insert(t, pool, "b", "n", queue.StatusPending, 0, 1, `[]`)
	insert(t, pool, "b", "n", queue.StatusCancelled, 1, 1, `[]`)
	if _, err := queue.New(pool).Enqueue(ctx, "later", nil, queue.WithQueue("b"), queue.WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE skiplock_tasks SET run_at = now() - interval '90 seconds' WHERE id = $1", due); err != nil {
		t.Fatal(err)
	}
	// An old completion counts in the totals, not in the recent windows.
	old := insert(t, pool, "a", "n", queue.StatusCompleted, 1, 1, `[]`)
	if _, err := pool.Exec(ctx, "UPDATE skiplock_tasks SET finished_at = now() - interval '10 minutes' WHERE id = $1", old); err != nil {
		t.Fatal(err)
	}

	s, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Queues) != 2 || s.Queues[0].Queue != "a" || s.Queues[1].Queue != "b" {
		t.Fatalf("queues = %+v", s.Queues)
	}
	a, b := s.Queues[0], s.Queues[1]
	if a.Completed != 4 || a.Failed != 1 || a.Running != 1 || a.Waiting != 1 || a.Pending != 0 || a.Scheduled != 0 || a.OldestDue != 0 {
		t.Fatalf("a = %+v", a)
	}
	if w := a.Recent; w[0].Completed != 3 || w[0].Failed != 1 || w[2].Completed != 4 || w[0].FailureRate() != 0.25 || w[0].PerMinute() != 3 {
		t.Fatalf("a.Recent = %+v", w)
	}
	if b.Pending != 1 || b.Scheduled != 1 || b.Retrying != 0 || b.Waiting != 0 || b.Cancelled != 1 || b.OldestDue < 89*time.Second || b.OldestDue > 5*time.Minute {
		t.Fatalf("b = %+v", b)
	}
	if s.Total.Completed != 4 || s.Total.Pending != 1 || s.Total.Scheduled != 1 || s.Total.Waiting != 1 || s.Total.OldestDue != b.OldestDue || s.Total.Recent[2].Completed != 4 {
		t.Fatalf("total = %+v", s.Total)
	}
}

func TestAdminInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	id := insert(t, pool, "q", "n", queue.StatusFailed, 1, 1, `[]`)
	type check struct {
		what          string
		err, validate error // the call's, and Validate's when it has one
	}
	var checks []check
	requeue := func(what string, req queue.RequeueRequest) {
		_, err := c.Requeue(ctx, req)
		checks = append(checks, check{what, err, req.Validate()})
	}
	running := []queue.Status{queue.StatusRunning}

	requeue("requeue running", queue.RequeueRequest{Filter: queue.Filter{Statuses: running}})
	requeue("unknown status", queue.RequeueRequest{Filter: queue.Filter{Statuses: []queue.Status{"bogus"}}})
	requeue("IDs with a filter", queue.RequeueRequest{Filter: queue.Filter{IDs: []int64{id}, Queues: []string{"q"}}})
	requeue("negative ID", queue.RequeueRequest{Filter: queue.Filter{IDs: []int64{-1}}})
	requeue("batch size", queue.RequeueRequest{BatchSize: -1})
	cancel := queue.CancelRequest{Filter: queue.Filter{Statuses: []queue.Status{queue.StatusRunning, queue.StatusCompleted}}}
	_, err := c.Cancel(ctx, cancel)
	checks = append(checks, check{"cancel completed", err, cancel.Validate()})
	cancel = queue.CancelRequest{BatchSize: queue.MaxBatch + 1}
	_, err = c.CancelTx(ctx, pool, cancel)
	checks = append(checks, check{"cancel batch size", err, cancel.Validate()})
	purge := queue.PurgeRequest{}
	_, err = c.Purge(ctx, purge)
	checks = append(checks, check{"purge without FinishedBefore", err, purge.Validate()})
	purge = queue.PurgeRequest{Filter: queue.Filter{FinishedBefore: time.Now(), Statuses: []queue.Status{queue.StatusPending}}}
	_, err = c.Purge(ctx, purge)
	checks = append(checks, check{"purge pending", err, purge.Validate()})
	page := queue.Page{Limit: queue.MaxListLimit + 1}
	_, err = c.List(ctx, queue.Filter{}, page)
	checks = append(checks, check{"list limit", err, page.Validate()})
	bogus := queue.Filter{Statuses: []queue.Status{"due"}}
	_, err = c.List(ctx, bogus, queue.Page{})
	checks = append(checks, check{"list unknown status", err, bogus.Validate()})
	named := queue.CancelRequest{Filter: queue.Filter{IDs: []int64{id}, Sequence: "s"}}
	_, err = c.Cancel(ctx, named)
	checks = append(checks, check{"cancel IDs with a sequence", err, named.Validate()})
	for _, ch := range checks {
		if !errors.Is(ch.err, queue.ErrInvalidRequest) {
			t.Errorf("%s: err = %v, want ErrInvalidRequest", ch.what, ch.err)
		}
		if ch.validate == nil || ch.validate.Error() != ch.err.Error() {
			t.Errorf("%s: Validate says %v, the call %v", ch.what, ch.validate, ch.err)
		}
	}
	if s := get(t, c, id).Status; s != queue.StatusFailed {
		t.Fatalf("an invalid request changed task %d to %s", id, s)
	}
	for _, err := range []error{
		queue.RequeueRequest{}.Validate(), queue.CancelRequest{}.Validate(),
		queue.PurgeRequest{Filter: queue.Filter{FinishedBefore: time.Now()}}.Validate(), queue.Filter{}.Validate(),
	} {
		if err != nil {
			t.Errorf("a request of defaults is invalid: %v", err)
		}
	}
}

// TestTxTwins: RequeueTx, CancelTx and DeleteTx change tasks within the
// caller's transaction: rolled back, they change nothing (a dry run) and
// report what the committed change then does.
func TestTxTwins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	failed := insert(t, pool, "q", "n", queue.StatusFailed, 1, 1, `[]`)
	running := insert(t, pool, "q", "n", queue.StatusRunning, 1, 1, `[]`)
	ids := []int64{failed, running, 424242}
	want := []queue.SkippedTask{{ID: running, Status: queue.StatusRunning}, {ID: 424242}}

	for _, commit := range []bool{false, true} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.RequeueTx(ctx, tx, queue.RequeueRequest{Filter: queue.Filter{IDs: ids}})
		if err != nil || !slices.Equal(res.IDs, []int64{failed}) || !slices.Equal(res.Skipped, want) {
			t.Fatalf("RequeueTx = %+v, %v", res, err)
		}
		if s := get(t, c, failed).Status; s != queue.StatusFailed {
			t.Fatalf("requeued in a transaction not yet committed: %s", s)
		}
		end := tx.Rollback
		if commit {
			end = tx.Commit
		}
		if err := end(ctx); err != nil {
			t.Fatal(err)
		}
		if s, wantStatus := get(t, c, failed).Status, map[bool]queue.Status{false: queue.StatusFailed, true: queue.StatusPending}[commit]; s != wantStatus {
			t.Fatalf("commit %v: task is %s, want %s", commit, s, wantStatus)
		}
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := c.CancelTx(ctx, tx, queue.CancelRequest{Filter: queue.Filter{IDs: ids}})
	if err != nil || !slices.Equal(cancelled.IDs, []int64{failed}) || !slices.Equal(cancelled.Skipped, want) {
		t.Fatalf("CancelTx = %+v, %v", cancelled, err)
	}
	deleted, err := c.DeleteTx(ctx, tx, ids)
	if err != nil || !slices.Equal(deleted.IDs, []int64{failed}) || !slices.Equal(deleted.Skipped, want) {
		t.Fatalf("DeleteTx = %+v, %v", deleted, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if s := get(t, c, failed).Status; s != queue.StatusPending {
		t.Fatalf("rolled back, the task is %s, want pending", s)
	}
}

// TestCancelRunningMatching asks for the cancellation of the running tasks
// a filter selects, and of no others, and cancels the pending ones it
// selects with them, in one audit record.
func TestCancelRunningMatching(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	for range 3 {
		insert(t, pool, "a", "n", queue.StatusRunning, 1, 1, `[]`)
	}
	insert(t, pool, "b", "n", queue.StatusRunning, 1, 1, `[]`)
	pending := insert(t, pool, "a", "n", queue.StatusPending, 0, 1, `[]`)
	insert(t, pool, "b", "n", queue.StatusPending, 0, 1, `[]`)
	res, err := c.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{Queues: []string{"a"}, Statuses: []queue.Status{queue.StatusRunning}}})
	if err != nil || len(res.Requested) != 3 || res.Changed != 0 {
		t.Fatalf("Cancel of running tasks = %+v, %v; want 3 asked", res, err)
	}
	if s := get(t, c, pending).Status; s != queue.StatusPending {
		t.Fatalf("a cancel of running tasks alone left pending task %d %s", pending, s)
	}
	res, err = c.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{Queues: []string{"a"},
		Statuses: []queue.Status{queue.StatusPending, queue.StatusRunning}}})
	if err != nil || len(res.Requested) != 3 || res.Changed != 1 || !slices.IsSorted(res.Requested) {
		t.Fatalf("Cancel of pending and running tasks = %+v, %v; want 1 cancelled, 3 asked", res, err)
	}
	if s := get(t, c, pending).Status; s != queue.StatusCancelled {
		t.Fatalf("task %d is %s, want cancelled", pending, s)
	}
	log, err := c.AuditLog(ctx, queue.AuditFilter{})
	if err != nil || len(log) != 2 || log[0].Action != queue.AuditCancel || log[0].Affected != 4 || log[1].Action != queue.AuditCancelRunning {
		t.Fatalf("audit log = %+v, %v; want one cancel-running record, then one cancel of 4 tasks", log, err)
	}
	if got := count(t, pool, "cancel_requested_at IS NOT NULL"); got != 3 {
		t.Fatalf("%d tasks have a cancellation request, want the 3 running in queue a", got)
	}
	if got := count(t, pool, "queue = 'a' AND status = 'running' AND cancel_requested_at IS NOT NULL"); got != 3 {
		t.Fatalf("%d running tasks of queue a have a request, want 3", got)
	}
}

func TestAdminNotMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := queue.New(pgtest.NewPool(t, pgtest.Schema(t, false)))
	_, err1 := c.List(ctx, queue.Filter{}, queue.Page{})
	_, err2 := c.Requeue(ctx, queue.RequeueRequest{})
	_, err3 := c.Stats(ctx)
	_, err4 := c.Purge(ctx, queue.PurgeRequest{Filter: queue.Filter{FinishedBefore: time.Now()}})
	for i, err := range []error{err1, err2, err3, err4} {
		if !errors.Is(err, migrations.ErrNotMigrated) {
			t.Errorf("call %d: err = %v, want ErrNotMigrated", i+1, err)
		}
	}
}

func workChannel(name string) string {
	work, _ := schema.Channels(name)
	return work
}

// Task.Status tells stored pending tasks apart, and a Filter's Statuses
// select by the same values: in List, Count and Cancel.
func TestStatusesOfPendingTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, pgtest.Schema(t, true))
	c := queue.New(pool)
	due := insert(t, pool, "q", "n", queue.StatusPending, 0, 3, `[]`)
	dueAgain := insert(t, pool, "q", "n", queue.StatusPending, 1, 3, failedHistory("boom"))
	scheduled := insert(t, pool, "q", "n", queue.StatusPending, 0, 3, `[]`)
	retrying := insert(t, pool, "q", "n", queue.StatusPending, 1, 3, failedHistory("boom"))
	waiting := insert(t, pool, "q", "n", queue.StatusWaiting, 0, 3, `[]`)
	failed := insert(t, pool, "q", "n", queue.StatusFailed, 3, 3, failedHistory("boom"))
	if _, err := pool.Exec(ctx, "UPDATE skiplock_tasks SET run_at = now() + interval '1 hour' WHERE id = ANY($1)", []int64{scheduled, retrying}); err != nil {
		t.Fatal(err)
	}
	want := map[int64]queue.Status{due: queue.StatusPending, dueAgain: queue.StatusPending, scheduled: queue.StatusScheduled,
		retrying: queue.StatusRetrying, waiting: queue.StatusWaiting, failed: queue.StatusFailed}
	for id, st := range want {
		if got := get(t, c, id); got.Status != st {
			t.Errorf("task %d: status %s, want %s", id, got.Status, st)
		}
	}
	list := func(sts ...queue.Status) []int64 {
		t.Helper()
		f := queue.Filter{Statuses: sts}
		tasks, err := c.List(ctx, f, queue.Page{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, task := range tasks {
			if len(sts) > 0 && !slices.Contains(sts, task.Status) {
				t.Errorf("List(%v) has task %d, %s", sts, task.ID, task.Status)
			}
			ids = append(ids, task.ID)
		}
		slices.Sort(ids)
		return ids
	}
	for _, tc := range []struct {
		sts  []queue.Status
		want []int64
	}{
		{[]queue.Status{queue.StatusPending}, []int64{due, dueAgain}},
		{[]queue.Status{queue.StatusScheduled}, []int64{scheduled}},
		{[]queue.Status{queue.StatusRetrying, queue.StatusFailed}, []int64{retrying, failed}},
		{[]queue.Status{queue.StatusScheduled, queue.StatusPending, queue.StatusRetrying}, []int64{due, dueAgain, scheduled, retrying}},
		{nil, []int64{due, dueAgain, scheduled, retrying, waiting, failed}},
	} {
		if got := list(tc.sts...); !slices.Equal(got, tc.want) {
			t.Errorf("List(%v) = %v, want %v", tc.sts, got, tc.want)
		}
	}

	// Cancel by filter: the scheduled task only.
	res, err := c.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{Statuses: []queue.Status{queue.StatusScheduled}}})
	if err != nil || res.Changed != 1 || get(t, c, scheduled).Status != queue.StatusCancelled {
		t.Fatalf("cancel scheduled = %+v, %v", res, err)
	}
	// Cancel by IDs: the retrying task; the due one is reported as pending.
	res, err = c.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{IDs: []int64{due, retrying}, Statuses: []queue.Status{queue.StatusRetrying}}})
	if err != nil || !slices.Equal(res.IDs, []int64{retrying}) ||
		!slices.Equal(res.Skipped, []queue.SkippedTask{{ID: due, Status: queue.StatusPending}}) {
		t.Fatalf("cancel retrying by ID = %+v, %v", res, err)
	}
	if got := list(queue.StatusScheduled, queue.StatusPending, queue.StatusRetrying); !slices.Equal(got, []int64{due, dueAgain}) {
		t.Fatalf("pending after the cancels = %v", got)
	}
}
