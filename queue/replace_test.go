package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// keyTasks is the ids and statuses of the tasks of a replace key, in id
// order, as "id:status" words.
func keyTasks(t *testing.T, pool *pgxpool.Pool, key string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		"SELECT id::text || ':' || status FROM skiplock_tasks WHERE replace_key = $1 ORDER BY id", key)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func payloadOf(t *testing.T, c *queue.Client, id int64) string {
	t.Helper()
	task, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return string(task.Payload)
}

// A second call with the key replaces the pending task's contents, keeps
// its ID and says so; a call with another key inserts.
func TestReplaceKeyReplacesPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	var replaced bool
	first, err := c.Enqueue(ctx, "doc.index", map[string]int{"v": 1}, queue.WithReplaceKey("doc:1"), queue.Replaced(&replaced))
	if err != nil || replaced {
		t.Fatalf("first call: id %d, replaced %v, err %v", first, replaced, err)
	}
	second, err := c.Enqueue(ctx, "doc.reindex", map[string]int{"v": 2}, queue.WithReplaceKey("doc:1"), queue.Replaced(&replaced),
		queue.WithPriority(-3), queue.WithQueue("docs"), queue.WithDelay(time.Hour), queue.WithMaxAttempts(3),
		queue.WithMetadata(json.RawMessage(`{"trace":"x"}`)))
	if err != nil || !replaced || second != first {
		t.Fatalf("second call: id %d (first %d), replaced %v, err %v", second, first, replaced, err)
	}
	task, err := c.Get(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if string(task.Payload) != `{"v": 2}` || task.Name != "doc.reindex" || task.Queue != "docs" || task.Priority != -3 ||
		task.MaxAttempts != 3 || !strings.Contains(string(task.Metadata), `"trace"`) || task.ReplaceKey != "doc:1" {
		t.Fatalf("replaced task: %+v", task)
	}
	if until := time.Until(task.RunAt); until < 50*time.Minute {
		t.Fatalf("run_at not moved by WithDelay: %s from now", until)
	}
	other, err := c.Enqueue(ctx, "doc.index", 3, queue.WithReplaceKey("doc:2"), queue.Replaced(&replaced))
	if err != nil || replaced || other == first {
		t.Fatalf("other key: id %d, replaced %v, err %v", other, replaced, err)
	}
	if got := keyTasks(t, pool, "doc:1"); len(got) != 1 {
		t.Fatalf("doc:1 has %v", got)
	}
	// Plain tasks beside keyed ones stay on their path.
	if _, err := c.Enqueue(ctx, "doc.index", 4); err != nil {
		t.Fatal(err)
	}
}

// Each WithDebounce call moves the pending task's run time to d after the
// call (database clock) and replaces its payload.
func TestDebouncePushesRunAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	dbNow := func() time.Time {
		var now time.Time
		if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}

	var ids []int64
	var lastRunAt time.Time
	for i := range 3 {
		before := dbNow()
		id, err := c.Enqueue(ctx, "notify", i, queue.WithDebounce("user:7", time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		task, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		after := dbNow()
		if task.RunAt.Before(before.Add(time.Hour)) || task.RunAt.After(after.Add(time.Hour)) {
			t.Fatalf("call %d: run_at %s, want an hour after the call (between %s and %s)", i, task.RunAt, before, after)
		}
		if !task.RunAt.After(lastRunAt) {
			t.Fatalf("call %d: run_at %s did not move past %s", i, task.RunAt, lastRunAt)
		}
		lastRunAt = task.RunAt
		if got := payloadOf(t, c, id); got != string(rune('0'+i)) {
			t.Fatalf("call %d: payload %s", i, got)
		}
	}
	if ids[1] != ids[0] || ids[2] != ids[0] {
		t.Fatalf("ids %v, want one task", ids)
	}
	if got := keyTasks(t, pool, "user:7"); len(got) != 1 {
		t.Fatalf("user:7 has %v", got)
	}
}

// A burst of debounced calls, with a worker running, runs one task, with
// the last call's payload, no earlier than d after the last call.
func TestDebounceBurstRunsOnceAfterLastCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	const d = 300 * time.Millisecond

	type run struct {
		id      int64
		payload string
	}
	runs := make(chan run, 100)
	w := worker.New(pool, worker.Config{Concurrency: 4, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(runCtx, worker.Handlers{"flush": func(ctx context.Context, task *worker.Task) error {
			runs <- run{task.ID, string(task.Payload)}
			return nil
		}})
	}()
	defer func() { stop(); <-done }()

	var id int64
	var lastCall time.Time
	for i := range 10 {
		if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&lastCall); err != nil {
			t.Fatal(err)
		}
		got, err := c.Enqueue(ctx, "flush", i, queue.WithDebounce("buffer:1", d))
		if err != nil {
			t.Fatal(err)
		}
		if id == 0 {
			id = got
		}
	}
	var r run
	select {
	case r = <-runs:
	case <-time.After(pgtest.Patient(30 * time.Second)):
		t.Fatal("the debounced task never ran")
	}
	// On a busy machine the calls may outlast d: then the task ran before
	// the last calls, and they made new tasks. Whatever ran last ran with
	// the last payload, once, no earlier than d after the last call.
	last := r
	for last.payload != "9" {
		select {
		case last = <-runs:
		case <-time.After(pgtest.Patient(30 * time.Second)):
			t.Fatalf("the last payload never ran (last run %+v)", last)
		}
	}
	task, err := c.Get(ctx, last.id)
	if err != nil {
		t.Fatal(err)
	}
	if task.StartedAt == nil || task.StartedAt.Before(lastCall.Add(d)) {
		t.Fatalf("task ran at %v, before the last call (%s) + %s", task.StartedAt, lastCall, d)
	}
	if r.id != id {
		t.Logf("the burst outlasted %s on this machine: first run %+v", d, r)
	}
	select {
	case extra := <-runs:
		t.Fatalf("ran again after the last payload: %+v", extra)
	default:
	}
}

// Once the task has started (running, retrying, finished, cancelled and
// requeued), a new call inserts a new task, which the next call replaces.
func TestReplaceKeyAfterStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	enqueue := func(payload int) (int64, bool) {
		t.Helper()
		var replaced bool
		id, err := c.Enqueue(ctx, "sync", payload, queue.WithReplaceKey("k"), queue.Replaced(&replaced))
		if err != nil {
			t.Fatal(err)
		}
		return id, replaced
	}

	a, _ := enqueue(1)
	// Claimed, as a worker's claim leaves it.
	exec("UPDATE skiplock_tasks SET status = 'running', attempt = 1, started_at = now(), worker_id = 'w' WHERE id = $1", a)
	b, replaced := enqueue(2)
	if replaced || b == a {
		t.Fatalf("while running: id %d (running %d), replaced %v", b, a, replaced)
	}
	if again, replaced := enqueue(3); !replaced || again != b {
		t.Fatalf("second call while running: id %d, replaced %v, want %d replaced", again, replaced, b)
	}
	if got := payloadOf(t, c, a); got != "1" {
		t.Fatalf("the running task's payload changed: %s", got)
	}
	// The running task fails and will be retried: pending again, but
	// started; it is neither replaced nor in the way of b.
	exec(`UPDATE skiplock_tasks SET status = 'pending', errors = '[{"attempt":1,"outcome":"error"}]' WHERE id = $1`, a)
	if again, replaced := enqueue(4); !replaced || again != b {
		t.Fatalf("while a retry is pending: id %d, replaced %v, want %d replaced", again, replaced, b)
	}
	if got := payloadOf(t, c, a); got != "1" {
		t.Fatalf("the retried task's payload changed: %s", got)
	}
	// Handed back at shutdown with its attempt refunded: started, so still
	// not the key's pending task.
	exec("UPDATE skiplock_tasks SET status = 'pending', attempt = 0, errors = '[]' WHERE id = $1", a)
	if again, replaced := enqueue(5); !replaced || again != b {
		t.Fatalf("after a refund: id %d, replaced %v, want %d replaced", again, replaced, b)
	}
	// b finishes: the next call inserts.
	exec("UPDATE skiplock_tasks SET status = 'completed', attempt = 1, started_at = now(), finished_at = now() WHERE id = $1", b)
	d, replaced := enqueue(6)
	if replaced || d == b || d == a {
		t.Fatalf("after completion: id %d, replaced %v", d, replaced)
	}
	// Cancelled before it started, then a new one, then the cancelled one
	// requeued: it comes back with a history, beside the new one, with no
	// conflict.
	if _, err := c.Cancel(ctx, queue.CancelRequest{IDs: []int64{d}}); err != nil {
		t.Fatal(err)
	}
	e, replaced := enqueue(7)
	if replaced || e == d {
		t.Fatalf("after cancel: id %d, replaced %v", e, replaced)
	}
	res, err := c.Requeue(ctx, queue.RequeueRequest{IDs: []int64{d}, Filter: queue.Filter{Statuses: []queue.Status{queue.StatusCancelled}}, ResetAttempts: true})
	if err != nil || res.Changed != 1 {
		t.Fatalf("requeue: %+v, %v", res, err)
	}
	if again, replaced := enqueue(8); !replaced || again != e {
		t.Fatalf("after requeue: id %d, replaced %v, want %d replaced", again, replaced, e)
	}
	if got := payloadOf(t, c, d); got != "6" {
		t.Fatalf("the requeued task's payload changed: %s", got)
	}
}

// Many goroutines calling at once leave exactly one pending task, and
// none gets an error; every call but one replaced.
func TestReplaceKeyConcurrentCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	const goroutines, calls = 16, 15
	var wg sync.WaitGroup
	var inserted, replacedN atomic.Int64
	ids := sync.Map{}
	errs := make(chan error, goroutines*calls)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				var replaced bool
				id, err := c.Enqueue(ctx, "recount", g*1000+i, queue.WithDebounce("hot", time.Hour), queue.Replaced(&replaced))
				if err != nil {
					errs <- err
					return
				}
				ids.Store(id, true)
				if replaced {
					replacedN.Add(1)
				} else {
					inserted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := 0
	ids.Range(func(any, any) bool { n++; return true })
	if n != 1 || inserted.Load() != 1 || replacedN.Load() != goroutines*calls-1 {
		t.Fatalf("%d ids, %d inserted, %d replaced", n, inserted.Load(), replacedN.Load())
	}
	if got := keyTasks(t, pool, "hot"); len(got) != 1 || !strings.HasSuffix(got[0], ":pending") {
		t.Fatalf("hot has %v", got)
	}
}

// Producers in separate OS processes, calling at once with one key, leave
// exactly one pending task; none gets an error, and every process was
// handed that task's ID.
func TestReplaceKeyProcesses(t *testing.T) {
	if url := os.Getenv("SKIPLOCK_REPLACE_CHILD_URL"); url != "" {
		replaceChild(url, os.Getenv("SKIPLOCK_REPLACE_CHILD_SCHEMA"))
		return
	}
	t.Parallel()
	schema := pgtest.Schema(t, true)
	pool := pgtest.NewPool(t, schema)
	const procs = 4
	cmds := make([]*exec.Cmd, procs)
	outs := make([]strings.Builder, procs)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestReplaceKeyProcesses$")
		cmds[i].Env = append(os.Environ(), "SKIPLOCK_REPLACE_CHILD_URL="+pgtest.Server(t).URL, "SKIPLOCK_REPLACE_CHILD_SCHEMA="+schema)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
	}
	for _, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	var inserted int
	ids := map[string]bool{}
	for i, cmd := range cmds {
		err := cmd.Wait()
		out := outs[i].String()
		var n, r int
		var id string
		at := strings.Index(out, "replace-child: inserted")
		if err != nil || at < 0 {
			t.Fatalf("process %d: %v:\n%s", i, err, out)
		}
		if _, err := fmt.Sscanf(out[at:], "replace-child: inserted %d replaced %d id %s", &n, &r, &id); err != nil {
			t.Fatalf("process %d: %v:\n%s", i, err, out)
		}
		inserted += n
		ids[id] = true
	}
	if inserted != 1 || len(ids) != 1 {
		t.Fatalf("%d inserted, ids %v; want one task", inserted, ids)
	}
	if got := keyTasks(t, pool, "proc"); len(got) != 1 || !strings.HasSuffix(got[0], ":pending") {
		t.Fatalf("proc has %v", got)
	}
}

// replaceChild is one process of TestReplaceKeyProcesses: it calls
// WithDebounce 50 times and prints what it got.
func replaceChild(url, schema string) {
	fail := func(err error) {
		fmt.Println("replace-child: error:", err)
		os.Exit(1)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		fail(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		fail(err)
	}
	c := queue.New(pool)
	var mu sync.Mutex
	inserted, replacedN := 0, 0
	ids := map[int64]bool{}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				var replaced bool
				id, err := c.Enqueue(context.Background(), "recount", fmt.Sprint(os.Getpid(), g, i), queue.WithDebounce("proc", time.Hour), queue.Replaced(&replaced))
				if err != nil {
					fail(err)
				}
				mu.Lock()
				ids[id] = true
				if replaced {
					replacedN++
				} else {
					inserted++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(ids) != 1 {
		fail(fmt.Errorf("ids %v", ids))
	}
	for id := range ids {
		fmt.Printf("replace-child: inserted %d replaced %d id %d\n", inserted, replacedN, id)
	}
	pool.Close()
	os.Exit(0)
}

// In two transactions of two connections: the second waits for the first
// and then replaces what it committed; a rollback leaves the pending task
// as it was.
func TestReplaceKeyTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	begin := func() pgx.Tx {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(ctx) }) //nolint:errcheck // committed, or the test failed
		return tx
	}
	type result struct {
		id       int64
		replaced bool
		err      error
	}
	enqueueTx := func(tx pgx.Tx, payload int) chan result {
		ch := make(chan result, 1)
		go func() {
			var r result
			r.id, r.err = c.EnqueueTx(ctx, tx, "sync", payload, queue.WithReplaceKey("tx"), queue.Replaced(&r.replaced))
			ch <- r
		}()
		return ch
	}
	waitBlocked := func(what string) {
		t.Helper()
		pgtest.Eventually(t, pgtest.Patient(10*time.Second), what, func() bool {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%TaskInsertReplacing%' AND datname = current_database()
				  AND pid <> pg_backend_pid()`).Scan(&n)
			return err == nil && n > 0
		})
	}

	// Both insert: the second waits on the first's uncommitted task.
	tx1, tx2 := begin(), begin()
	r1 := <-enqueueTx(tx1, 1)
	if r1.err != nil || r1.replaced {
		t.Fatalf("tx1: %+v", r1)
	}
	ch2 := enqueueTx(tx2, 2)
	waitBlocked("tx2 waits for tx1's task")
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := <-ch2
	if r2.err != nil || !r2.replaced || r2.id != r1.id {
		t.Fatalf("tx2: %+v, want task %d replaced", r2, r1.id)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := payloadOf(t, c, r1.id); got != "2" {
		t.Fatalf("payload %s, want tx2's", got)
	}

	// Both replace: the second waits for the first's row lock.
	tx3, tx4 := begin(), begin()
	if r := <-enqueueTx(tx3, 3); r.err != nil || !r.replaced || r.id != r1.id {
		t.Fatalf("tx3: %+v", r)
	}
	ch4 := enqueueTx(tx4, 4)
	waitBlocked("tx4 waits for tx3's row lock")
	if err := tx3.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-ch4; r.err != nil || !r.replaced || r.id != r1.id {
		t.Fatalf("tx4: %+v", r)
	}
	// tx4 rolls back: tx3's payload stays.
	if err := tx4.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := payloadOf(t, c, r1.id); got != "3" {
		t.Fatalf("payload %s after the rollback, want tx3's", got)
	}
	if got := keyTasks(t, pool, "tx"); len(got) != 1 {
		t.Fatalf("tx has %v", got)
	}
}

// A worker claims tasks while one producer replaces them as fast as it
// can: every task runs once, with the payload of the last call that
// returned its ID. A call that reported a replacement is never lost to a
// claim that took the old payload.
func TestReplaceKeyClaimRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	var mu sync.Mutex
	ran := map[int64][]string{}
	w := worker.New(pool, worker.Config{Concurrency: 4, PollInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(runCtx, worker.Handlers{"apply": func(ctx context.Context, task *worker.Task) error {
			mu.Lock()
			ran[task.ID] = append(ran[task.ID], string(task.Payload))
			mu.Unlock()
			return nil
		}})
	}()
	defer func() { stop(); <-done }()

	const calls = 300
	last := map[int64]int{} // id -> the last payload a call returned it for
	replacedN := 0
	for i := 1; i <= calls; i++ {
		var replaced bool
		id, err := c.Enqueue(ctx, "apply", i, queue.WithReplaceKey("race"), queue.Replaced(&replaced))
		if err != nil {
			t.Fatal(err)
		}
		last[id] = i
		if replaced {
			replacedN++
		}
	}
	pgtest.Eventually(t, pgtest.Patient(60*time.Second), "every task of the key completed", func() bool {
		var open int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE replace_key = 'race' AND status <> 'completed'").Scan(&open)
		return err == nil && open == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for id, want := range last {
		if got := ran[id]; len(got) != 1 || got[0] != itoa(want) {
			t.Errorf("task %d ran with %v, want once with %d", id, got, want)
		}
	}
	if len(ran) != len(last) {
		t.Errorf("%d tasks ran, %d were returned", len(ran), len(last))
	}
	t.Logf("%d calls: %d tasks, %d replaced", calls, len(last), replacedN)
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// EnqueueMany with keys: tasks of one key in a batch replace each other in
// order, the last one winning; plain tasks of the batch are inserted; a
// pending task of a key from before the batch is replaced.
func TestReplaceKeyEnqueueMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	old, err := c.Enqueue(ctx, "sync", "old", queue.WithReplaceKey("b"))
	if err != nil {
		t.Fatal(err)
	}
	flags := make([]bool, 6)
	keyed := func(key string, i int) []queue.Option {
		return []queue.Option{queue.WithReplaceKey(key), queue.Replaced(&flags[i])}
	}
	ids, err := c.EnqueueMany(ctx, []queue.NewTask{
		{Name: "sync", Payload: "a1", Options: keyed("a", 0)},
		{Name: "plain", Payload: 1},
		{Name: "sync", Payload: "b1", Options: keyed("b", 2)},
		{Name: "sync", Payload: "a2", Options: keyed("a", 3)},
		{Name: "plain", Payload: 2, Options: []queue.Option{queue.WithUniqueKey("u")}},
		{Name: "sync", Payload: "c1", Options: append(keyed("c", 5), queue.WithDelay(time.Hour))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] != ids[3] || ids[2] != old || ids[1] == 0 || ids[4] == 0 || ids[5] == 0 {
		t.Fatalf("ids %v (old %d)", ids, old)
	}
	if want := []bool{false, false, true, true, false, false}; !equalBools(flags, want) {
		t.Fatalf("replaced flags %v, want %v", flags, want)
	}
	for id, want := range map[int64]string{ids[0]: `"a2"`, old: `"b1"`, ids[5]: `"c1"`, ids[1]: "1"} {
		if got := payloadOf(t, c, id); got != want {
			t.Errorf("task %d: payload %s, want %s", id, got, want)
		}
	}
	// EnqueueManyTx, rolled back: nothing changed.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueManyTx(ctx, tx, []queue.NewTask{{Name: "sync", Payload: "b2", Options: keyed("b", 2)}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := payloadOf(t, c, old); got != `"b1"` {
		t.Fatalf("after rollback: %s", got)
	}
	// By hand (an Actor in ctx): the same, with its audit record.
	actx := queue.WithActor(ctx, queue.Actor{Name: "ops"})
	var replaced bool
	if id, err := c.Enqueue(actx, "sync", "b3", queue.WithReplaceKey("b"), queue.Replaced(&replaced)); err != nil || id != old || !replaced {
		t.Fatalf("by hand: id %d, replaced %v, err %v", id, replaced, err)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Bad input is refused with one error naming what is wrong, and nothing is
// inserted or changed.
func TestReplaceKeyBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	var replaced bool
	for _, tc := range []struct {
		opts []queue.Option
		want string
	}{
		{[]queue.Option{queue.WithReplaceKey("")}, "WithReplaceKey: the key is empty"},
		{[]queue.Option{queue.WithDebounce("", time.Second)}, "WithDebounce: the key is empty"},
		{[]queue.Option{queue.WithReplaceKey(strings.Repeat("k", 1025))}, "replace key is 1,025 bytes"},
		{[]queue.Option{queue.WithDebounce("k", -time.Second)}, "WithDebounce: the delay must not be negative, got -1s"},
		{[]queue.Option{queue.WithDebounce("k", time.Second), queue.WithDelay(time.Second)}, "WithDebounce sets the run time"},
		{[]queue.Option{queue.WithDebounce("k", time.Second), queue.WithRunAt(time.Now())}, "WithDebounce sets the run time"},
		{[]queue.Option{queue.WithDebounce("k", time.Second), queue.WithReplaceKey("k")}, "WithReplaceKey and WithDebounce cannot be combined"},
		{[]queue.Option{queue.WithDebounce("k", time.Second), queue.WithUniqueKey("u")}, "WithDebounce cannot be combined with WithUniqueKey"},
		{[]queue.Option{queue.WithReplaceKey("k"), queue.WithUnique()}, "WithReplaceKey cannot be combined with WithUnique "},
		{[]queue.Option{queue.WithReplaceKey("k"), queue.WithUniqueKey("u"), queue.WithUniqueWindow(time.Hour)}, "WithReplaceKey cannot be combined with WithUniqueKey"},
		{[]queue.Option{queue.WithReplaceKey("k"), queue.WithSequence("s")}, "WithReplaceKey cannot be combined with WithSequence"},
		{[]queue.Option{queue.WithReplaceKey("k"), queue.WithDependsOn(1)}, "WithReplaceKey cannot be combined with WithDependsOn"},
		{[]queue.Option{queue.Replaced(&replaced)}, "Replaced needs WithReplaceKey or WithDebounce"},
	} {
		_, err := c.Enqueue(ctx, "t", 1, tc.opts...)
		if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v", tc.want, err)
		}
		_, err = c.EnqueueMany(ctx, []queue.NewTask{{Name: "t", Payload: 1}, {Name: "t", Payload: 2, Options: tc.opts}})
		if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q in EnqueueMany: got %v", tc.want, err)
		}
	}
	_, err := c.EnqueueWorkflow(ctx, queue.Workflow{Name: "wf", Steps: []queue.Step{
		{Name: "a", Options: []queue.Option{queue.WithReplaceKey("k")}},
	}})
	if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), "WithReplaceKey and WithDebounce do not apply to a step") {
		t.Errorf("workflow step: got %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tasks stored after bad input (%v)", n, err)
	}
}

// skiplock_enqueue_replace: the same from SQL, bad input refused with
// SQLSTATE 22023 and a message naming it.
func TestReplaceKeyFromSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	call := func(sql string) (int64, bool, error) {
		var id int64
		var replaced bool
		err := pool.QueryRow(ctx, sql).Scan(&id, &replaced)
		return id, replaced, err
	}
	id, replaced, err := call(`SELECT * FROM skiplock_enqueue_replace('mail.digest', '{"n":1}', replace_key => 'user:1', debounce => '1 hour')`)
	if err != nil || replaced {
		t.Fatalf("first: %d %v %v", id, replaced, err)
	}
	again, replaced, err := call(`SELECT * FROM skiplock_enqueue_replace('mail.digest', '{"n":2}', replace_key => 'user:1', debounce => '2 hours', priority => 5)`)
	if err != nil || !replaced || again != id {
		t.Fatalf("second: %d %v %v", again, replaced, err)
	}
	task, err := c.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if string(task.Payload) != `{"n": 2}` || task.Priority != 5 || time.Until(task.RunAt) < 100*time.Minute || task.ReplaceKey != "user:1" {
		t.Fatalf("replaced from SQL: %+v", task)
	}
	// The Go client replaces what SQL inserted.
	if got, err := c.Enqueue(ctx, "mail.digest", map[string]int{"n": 3}, queue.WithReplaceKey("user:1"), queue.Replaced(&replaced)); err != nil || got != id || !replaced {
		t.Fatalf("from Go: %d %v %v", got, replaced, err)
	}
	for sql, want := range map[string]string{
		`SELECT * FROM skiplock_enqueue_replace('x', '1')`:                                                        "replace key is NULL",
		`SELECT * FROM skiplock_enqueue_replace('x', '1', replace_key => '')`:                                     "replace key is empty",
		`SELECT * FROM skiplock_enqueue_replace('x', '1', replace_key => 'k', debounce => '-1 second')`:           "debounce must not be negative",
		`SELECT * FROM skiplock_enqueue_replace('x', '1', replace_key => 'k', debounce => '1s', run_at => now())`: "cannot be combined with run_at",
	} {
		_, _, err := call(sql)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "22023") {
			t.Errorf("%s: got %v, want %q (22023)", sql, err, want)
		}
	}
}
