package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func count(t *testing.T, pool *pgxpool.Pool, where string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock_tasks WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	client := queue.New(pool)

	type email struct {
		To string `json:"to"`
	}
	id, err := client.Enqueue(ctx, "email.send", email{To: "a@example.com"},
		queue.WithQueue("mail"), queue.WithPriority(-3), queue.WithMaxAttempts(5),
		queue.WithTimeout(1500*time.Millisecond), queue.WithMetadata(json.RawMessage(`{"trace":"x"}`)))
	if err != nil {
		t.Fatal(err)
	}
	task, err := client.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if task.Name != "email.send" || task.Queue != "mail" || task.Priority != -3 || task.MaxAttempts != 5 ||
		task.Timeout != 1500*time.Millisecond || task.Status != queue.StatusPending || task.Attempt != 0 {
		t.Fatalf("unexpected task: %+v", task)
	}
	if string(task.Payload) != `{"to": "a@example.com"}` {
		t.Fatalf("payload = %s", task.Payload)
	}
	if string(task.Metadata) != `{"trace": "x"}` {
		t.Fatalf("metadata = %s", task.Metadata)
	}
	if time.Since(task.RunAt) > time.Minute || time.Until(task.RunAt) > time.Second {
		t.Fatalf("run_at %s is not now", task.RunAt)
	}

	// Raw JSON payloads pass through; delays are on the database clock.
	id2, err := client.Enqueue(ctx, "raw", json.RawMessage(`[1,2,3]`), queue.WithDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	task2, err := client.Get(ctx, id2)
	if err != nil {
		t.Fatal(err)
	}
	if string(task2.Payload) != `[1, 2, 3]` || time.Until(task2.RunAt) < 59*time.Minute {
		t.Fatalf("task2 = %+v", task2)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	id3, err := client.Enqueue(ctx, "later", nil, queue.WithRunAt(at))
	if err != nil {
		t.Fatal(err)
	}
	task3, _ := client.Get(ctx, id3)
	if !task3.RunAt.Equal(at) || string(task3.Payload) != "null" {
		t.Fatalf("task3 = %+v", task3)
	}
}

func TestEnqueueInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	client := queue.New(pool)

	cases := []struct {
		name    string
		payload any
		opts    []queue.Option
		want    string
	}{
		{"", nil, nil, "task name is empty"},
		{strings.Repeat("x", 256), nil, nil, `task name is 256 bytes, over the 255-byte limit (queue.MaxNameLength): "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"...`},
		{"bad.json", []byte(`{"a":`), nil, "payload is not valid JSON"},
		{"bad.raw", json.RawMessage(`nope`), nil, "payload is not valid JSON"},
		{"bad.value", make(chan int), nil, "payload cannot be encoded as JSON"},
		{"bad.queue", nil, []queue.Option{queue.WithQueue("")}, "queue name is empty"},
		{"bad.priority", nil, []queue.Option{queue.WithPriority(40000)}, "priority 40000 is outside"},
		{"bad.attempts", nil, []queue.Option{queue.WithMaxAttempts(0)}, "max attempts must be at least 1"},
		{"bad.delay", nil, []queue.Option{queue.WithDelay(-time.Second)}, "delay must not be negative"},
		{"bad.timeout", nil, []queue.Option{queue.WithTimeout(time.Microsecond)}, "timeout must be at least 1ms"},
		{"bad.metadata", nil, []queue.Option{queue.WithMetadata(json.RawMessage(`[1]`))}, "metadata must be a JSON object"},
	}
	for _, c := range cases {
		_, err := client.Enqueue(ctx, c.name, c.payload, c.opts...)
		if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Enqueue(%.20q): err = %v, want ErrInvalidTask containing %q", c.name, err, c.want)
		}
	}
	// One bad task in a batch inserts nothing.
	_, err := client.EnqueueMany(ctx, []queue.NewTask{{Name: "ok"}, {Name: "bad", Payload: []byte("{")}})
	if !errors.Is(err, queue.ErrInvalidTask) {
		t.Fatalf("EnqueueMany: err = %v", err)
	}
	if n := count(t, pool, "true"); n != 0 {
		t.Fatalf("%d tasks inserted, want 0", n)
	}
}

func TestEnqueueTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	client := queue.New(pool)

	// Rolled back: the task never existed.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.EnqueueTx(ctx, tx, "in.tx", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "true"); n != 0 {
		t.Fatalf("uncommitted task visible outside its transaction: %d", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "true"); n != 0 {
		t.Fatalf("rolled back transaction left %d tasks", n)
	}

	// Committed: it exists, along with the caller's own write.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "CREATE TABLE orders (id int)"); err != nil {
			return err
		}
		_, err := queue.New(pool).EnqueueTx(ctx, tx, "in.tx", nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "name = 'in.tx'"); n != 1 {
		t.Fatalf("committed transaction left %d tasks, want 1", n)
	}
}

func TestEnqueueMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	client := queue.New(pool)

	tasks := make([]queue.NewTask, 12000) // more than one insert chunk
	for i := range tasks {
		tasks[i] = queue.NewTask{Name: "bulk", Payload: map[string]int{"i": i}}
	}
	ids, err := client.EnqueueMany(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(tasks) {
		t.Fatalf("got %d ids", len(ids))
	}
	// IDs come back in input order.
	for _, i := range []int{0, 5000, 11999} {
		task, err := client.Get(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ I int }
		if err := json.Unmarshal(task.Payload, &p); err != nil || p.I != i {
			t.Fatalf("ids[%d] has payload %s", i, task.Payload)
		}
	}
}

// TestEnqueueManyOptions: a batch without unique keys goes in by COPY;
// every option must land as Enqueue would write it, run_at on the
// database's clock, and a batch with one unique key takes the INSERT path
// and still reports its duplicate.
func TestEnqueueManyOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	client := queue.New(pool)

	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	tasks := []queue.NewTask{
		{Name: "plain", Payload: 1},
		{Name: "opts", Payload: json.RawMessage(`{"a": [1, 2]}`), Options: []queue.Option{
			queue.WithQueue("mail"), queue.WithPriority(-7), queue.WithMaxAttempts(3), queue.WithTimeout(2500 * time.Millisecond),
			queue.WithMetadata(json.RawMessage(`{"trace": "t"}`)), queue.WithExclusiveKey("acct-1")}},
		{Name: "delayed", Options: []queue.Option{queue.WithDelay(time.Hour)}},
		{Name: "at", Options: []queue.Option{queue.WithRunAt(at)}},
	}
	var dbNow time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	ids, err := client.EnqueueMany(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(tasks) || ids[0] >= ids[1] || ids[1] >= ids[2] || ids[2] >= ids[3] {
		t.Fatalf("ids = %v, want 4 ascending", ids)
	}
	got := make([]*queue.Task, len(ids))
	for i, id := range ids {
		if got[i], err = client.Get(ctx, id); err != nil {
			t.Fatal(err)
		}
		if got[i].Name != tasks[i].Name || got[i].Status != queue.StatusPending {
			t.Fatalf("ids[%d] is %+v", i, got[i])
		}
	}
	if p, q := got[0], got[0]; string(p.Payload) != "1" || q.Queue != queue.DefaultQueue || q.MaxAttempts != queue.DefaultMaxAttempts ||
		q.Priority != 0 || q.Timeout != 0 || string(q.Metadata) != "{}" || q.RunAt.Sub(dbNow) < -time.Second || q.RunAt.Sub(dbNow) > time.Minute {
		t.Errorf("plain task: %+v (database now %s)", q, dbNow)
	}
	if o := got[1]; string(o.Payload) != `{"a": [1, 2]}` || o.Queue != "mail" || o.Priority != -7 || o.MaxAttempts != 3 ||
		o.Timeout != 2500*time.Millisecond || string(o.Metadata) != `{"trace": "t"}` {
		t.Errorf("task with options: %+v", o)
	}
	var exclusive string
	if err := pool.QueryRow(ctx, "SELECT exclusive_key FROM skiplock_tasks WHERE id = $1", ids[1]).Scan(&exclusive); err != nil || exclusive != "acct-1" {
		t.Errorf("exclusive key = %q, %v", exclusive, err)
	}
	if d := got[2].RunAt.Sub(got[0].RunAt); d != time.Hour {
		t.Errorf("delayed task runs %s after the plain one, want 1h", d)
	}
	if !got[3].RunAt.Equal(at) {
		t.Errorf("run_at = %s, want %s", got[3].RunAt, at)
	}

	// One unique key in the batch: INSERT ... ON CONFLICT, duplicates reported.
	first, err := client.Enqueue(ctx, "uniq", nil, queue.WithUniqueKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err = client.EnqueueMany(ctx, []queue.NewTask{{Name: "a"}, {Name: "uniq", Options: []queue.Option{queue.WithUniqueKey("k1")}}, {Name: "b"}})
	var dup *queue.DuplicateError
	if !errors.As(err, &dup) || dup.Index != 1 || dup.ExistingID != first || len(ids) != 3 || ids[1] != first {
		t.Fatalf("EnqueueMany with a taken key: ids %v, err %v", ids, err)
	}
	if n := count(t, pool, "name IN ('a', 'b')"); n != 2 {
		t.Fatalf("%d of the other tasks inserted, want 2", n)
	}
}

func TestNotMigrated(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, pgtest.Schema(t, false))
	_, err := queue.New(pool).Enqueue(context.Background(), "x", nil)
	if !errors.Is(err, migrations.ErrNotMigrated) || !strings.Contains(err.Error(), "skiplock migrate up") {
		t.Fatalf("err = %v, want ErrNotMigrated naming the command", err)
	}
}

func TestGetNotFound(t *testing.T) {
	t.Parallel()
	_, err := queue.New(pgtest.Pool(t)).Get(context.Background(), 424242)
	if !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
}

// TestEnqueueGroupCommit: concurrent Enqueue calls share statements, and
// each still gets its own outcome.
func TestEnqueueGroupCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	client := queue.New(pool)

	const producers, each = 16, 50
	var wg sync.WaitGroup
	ids := make(chan int64, producers*each)
	errs := make(chan error, producers*each)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				switch {
				case p == 0 && i == 7: // a bad task fails alone
					if _, err := client.Enqueue(ctx, "", nil); !errors.Is(err, queue.ErrInvalidTask) {
						errs <- fmt.Errorf("bad task: %v", err)
					}
				case i == 9: // every producer enqueues one key: one wins
					id, err := client.Enqueue(ctx, "unique", nil, queue.WithUniqueKey("shared"))
					if err != nil && !errors.Is(err, queue.ErrDuplicate) {
						errs <- err
					}
					if id == 0 {
						errs <- fmt.Errorf("unique enqueue returned no id")
					}
				default:
					id, err := client.Enqueue(ctx, "grouped", map[string]int{"p": p, "i": i})
					if err != nil {
						errs <- err
					}
					ids <- id
				}
			}
		}()
	}
	wg.Wait()
	close(ids)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for id := range ids {
		if id == 0 || seen[id] {
			t.Fatalf("id %d returned twice or zero", id)
		}
		seen[id] = true
	}
	if n := count(t, pool, "name = 'grouped'"); n != len(seen) {
		t.Fatalf("%d grouped rows for %d ids", n, len(seen))
	}
	if n := count(t, pool, "name = 'unique'"); n != 1 {
		t.Fatalf("%d rows hold the unique key", n)
	}

	// A call whose context is already done is not sent.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := client.Enqueue(cctx, "cancelled", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if n := count(t, pool, "name = 'cancelled'"); n != 0 {
		t.Fatal("a cancelled call inserted its task")
	}
}

// TestDefaultHidesPassword: the default client's error for a DATABASE_URL
// it cannot use names no password. In a child process (this test binary),
// as Default remembers its first outcome.
func TestDefaultHidesPassword(t *testing.T) {
	if os.Getenv("SKIPLOCK_DEFAULT_CHILD") != "" {
		_, err := queue.Enqueue(context.Background(), "x", nil)
		fmt.Println(err)
		os.Exit(0)
	}
	t.Parallel()
	for _, url := range []string{
		"postgres://u:s3cret@db.internal:notaport/app",
		"host=db.internal port=x user=u password = s3cret",
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDefaultHidesPassword$")
		cmd.Env = append(os.Environ(), "SKIPLOCK_DEFAULT_CHILD=1", "DATABASE_URL="+url)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "opening the default client: DATABASE_URL: cannot parse") || strings.Contains(string(out), "s3cret") {
			t.Errorf("%s: %v, %q", url, err, out)
		}
	}
}

// TestPackageEnqueueTxWithoutDatabaseURL: the package-level EnqueueTx is
// handed its connection, so it needs no DATABASE_URL. In a child process
// (this test binary) without one, as Default remembers its first outcome.
func TestPackageEnqueueTxWithoutDatabaseURL(t *testing.T) {
	if os.Getenv("SKIPLOCK_TXONLY_CHILD") != "" {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, os.Getenv("SKIPLOCK_TXONLY_URL"))
		if err != nil {
			fmt.Println("connect:", err)
			os.Exit(0)
		}
		if _, err := conn.Exec(ctx, "SELECT set_config('search_path', $1, false)", os.Getenv("SKIPLOCK_TXONLY_SCHEMA")); err != nil {
			fmt.Println("search_path:", err)
			os.Exit(0)
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := queue.EnqueueTx(ctx, tx, "tx.only", map[string]int{"n": 1})
			return err
		})
		fmt.Println("result:", err)
		// Without a transaction or DATABASE_URL, Enqueue still says what
		// is missing.
		_, err = queue.Enqueue(ctx, "x", nil)
		fmt.Println("plain:", err)
		os.Exit(0)
	}
	t.Parallel()
	schema := pgtest.Schema(t, true)
	pool := pgtest.NewPool(t, schema)
	cmd := exec.Command(os.Args[0], "-test.run=^TestPackageEnqueueTxWithoutDatabaseURL$")
	cmd.Env = append(os.Environ(), "SKIPLOCK_TXONLY_CHILD=1", "DATABASE_URL=",
		"SKIPLOCK_TXONLY_URL="+pgtest.Server(t).URL, "SKIPLOCK_TXONLY_SCHEMA="+schema)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "result: <nil>") || !strings.Contains(string(out), "plain: opening the default client: DATABASE_URL is not set") {
		t.Fatalf("child: %v, %s", err, out)
	}
	if n := count(t, pool, "name = 'tx.only'"); n != 1 {
		t.Fatalf("%d tasks named tx.only, want 1", n)
	}
}
