package worker_test

import (
	"context"
	"errors"
	"fmt"
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

// seqStep is the payload of the sequence tests' tasks: its key and its
// place in the key's order.
type seqStep struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// seqLog records the runs of sequenced tasks, from whichever worker, and
// catches two of one key running at once.
type seqLog struct {
	mu      sync.Mutex
	running map[string]int // key -> step running now
	order   map[string][]string
	overlap []string
}

func newSeqLog() *seqLog {
	return &seqLog{running: map[string]int{}, order: map[string][]string{}}
}

func (l *seqLog) begin(s seqStep, attempt int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if other, ok := l.running[s.Key]; ok {
		l.overlap = append(l.overlap, fmt.Sprintf("%s: %d started while %d ran", s.Key, s.N, other))
	}
	l.running[s.Key] = s.N
	l.order[s.Key] = append(l.order[s.Key], fmt.Sprintf("%d@%d", s.N, attempt))
}

func (l *seqLog) end(s seqStep) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.running, s.Key)
}

func (l *seqLog) runs(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.order[key], " ")
}

// sequential checks in the table that each task of key started after the
// one before it finished, in id order.
func (b *bundle) sequential(t *testing.T, key string) {
	t.Helper()
	if n := b.count(t, `sequence_key = $1 AND started_at < (
		SELECT max(p.finished_at) FROM skiplock_tasks AS p WHERE p.sequence_key = $1 AND p.id < skiplock_tasks.id)`, key); n != 0 {
		t.Errorf("%s: %d tasks started before a task ahead of them finished", key, n)
	}
}

// Three keys of 50 tasks each and plain tasks beside them, enqueued one by
// one and in interleaved batches, run by two workers on separate pools with
// 4 slots each: each key's tasks run one at a time, in enqueue order, while
// the keys (and the plain tasks) run in parallel.
func TestSequenceOrderTwoWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	keys := []string{"account:1", "account:2", "account:3"}
	const perKey = 50

	var batch []queue.NewTask
	flush := func() {
		if _, err := b.client.EnqueueMany(ctx, batch); err != nil {
			t.Fatal(err)
		}
		batch = nil
	}
	for n := range perKey {
		for _, k := range keys {
			s := seqStep{Key: k, N: n}
			if n%10 < 5 {
				batch = append(batch, queue.NewTask{Name: "step", Payload: s, Options: []queue.Option{queue.WithSequence(k)}})
				continue
			}
			flush()
			b.enqueue(t, "step", s, queue.WithSequence(k))
		}
		batch = append(batch, queue.NewTask{Name: "plain", Payload: n})
	}
	flush()
	if n := b.count(t, "status = 'pending' AND sequence_key IS NOT NULL"); n != len(keys) {
		t.Fatalf("%d sequenced tasks pending after enqueue, want %d", n, len(keys))
	}

	log := newSeqLog()
	var inDB atomic.Int64 // runs that saw another task of their key running
	handlers := func(pool *pgxpool.Pool) worker.Handlers {
		return worker.Handlers{
			"step": func(ctx context.Context, task *worker.Task) error {
				var s seqStep
				if err := task.Decode(&s); err != nil {
					return err
				}
				log.begin(s, task.Attempt)
				defer log.end(s)
				var running int
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE sequence_key = $1 AND status = 'running'", s.Key).Scan(&running); err != nil {
					return err
				}
				if running != 1 {
					inDB.Add(1)
				}
				return nil
			},
			"plain": func(ctx context.Context, task *worker.Task) error { return nil },
		}
	}
	for range 2 {
		pool := pgtest.NewPool(t, b.schema)
		start(t, pool, worker.Config{Concurrency: 4}, handlers(pool))
	}
	waitFor(t, 10*time.Second, "every task completed", func() bool {
		return b.count(t, "status = 'completed'") == len(keys)*perKey+perKey
	})

	want := make([]string, perKey)
	for n := range perKey {
		want[n] = fmt.Sprintf("%d@1", n)
	}
	for _, k := range keys {
		if got := log.runs(k); got != strings.Join(want, " ") {
			t.Errorf("%s ran %s", k, got)
		}
		b.sequential(t, k)
	}
	if len(log.overlap) > 0 {
		t.Errorf("overlapping runs: %v", log.overlap)
	}
	if n := inDB.Load(); n != 0 {
		t.Errorf("%d runs saw another task of their key running", n)
	}
	var parallel int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks AS a JOIN skiplock_tasks AS o
		ON o.sequence_key <> a.sequence_key AND o.started_at < a.finished_at AND a.started_at < o.finished_at
		WHERE a.sequence_key IS NOT NULL`).Scan(&parallel); err != nil {
		t.Fatal(err)
	}
	t.Logf("pairs of tasks of different keys that overlapped: %d", parallel)
}

// A head that fails and is retried stays the head: the tasks behind it
// wait for its last attempt.
func TestSequenceRetryKeepsOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for n := range 3 {
		b.enqueue(t, "step", seqStep{Key: "k", N: n}, queue.WithSequence("k"), queue.WithMaxAttempts(3))
	}
	log := newSeqLog()
	start(t, b.pool, worker.Config{Concurrency: 4}, worker.Handlers{
		"step": func(ctx context.Context, task *worker.Task) error {
			var s seqStep
			_ = task.Decode(&s)
			log.begin(s, task.Attempt)
			defer log.end(s)
			if s.N == 0 && task.Attempt < 3 {
				return errors.New("not yet")
			}
			return nil
		},
	})
	waitFor(t, 5*time.Second, "the sequence completed", func() bool {
		return b.count(t, "status = 'completed'") == 3
	})
	if got := log.runs("k"); got != "0@1 0@2 0@3 1@1 2@1" {
		t.Fatalf("runs %s", got)
	}
	b.sequential(t, "k")
}

// With WithSequenceHold, a task that fails for good keeps the rest of its
// sequence waiting until it is requeued (it runs again first) or cancelled
// (the next runs); without it, the next runs after the failure.
func TestSequenceHoldOnFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := map[string]int64{}
	for _, k := range []string{"hold", "cancel", "free"} {
		opts := []queue.Option{queue.WithSequence(k)}
		if k != "free" {
			opts = append(opts, queue.WithSequenceHold())
		}
		for n := range 2 {
			ids[fmt.Sprintf("%s%d", k, n)] = b.enqueue(t, "step", seqStep{Key: k, N: n}, opts...)
		}
	}
	var failFirst atomic.Bool
	failFirst.Store(true)
	log := newSeqLog()
	obs := &claims{}
	start(t, b.pool, worker.Config{Concurrency: 4, Observer: obs}, worker.Handlers{
		"step": func(ctx context.Context, task *worker.Task) error {
			var s seqStep
			_ = task.Decode(&s)
			log.begin(s, task.Attempt)
			defer log.end(s)
			if s.N == 0 && failFirst.Load() {
				return worker.Permanent(errors.New("broken"))
			}
			return nil
		},
	})
	status := func(name string) queue.Status { return b.get(t, ids[name]).Status }
	waitFor(t, 5*time.Second, "the free sequence went past its failure", func() bool {
		return status("free1") == queue.StatusCompleted
	})
	waitFor(t, 5*time.Second, "the held heads failed", func() bool {
		return status("hold0") == queue.StatusFailed && status("cancel0") == queue.StatusFailed
	})
	waitClaims(t, 3, obs) // the worker has looked for work since
	if s1, s2 := status("hold1"), status("cancel1"); s1 != queue.StatusWaiting || s2 != queue.StatusWaiting {
		t.Fatalf("behind failed holding heads: %s and %s, want waiting", s1, s2)
	}
	if task := b.get(t, ids["hold1"]); !strings.Contains(task.Why(time.Now()), "its turn") {
		t.Errorf("why: %q", task.Why(time.Now()))
	}

	failFirst.Store(false)
	if _, err := b.client.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{IDs: []int64{ids["hold0"]}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{IDs: []int64{ids["cancel0"]}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the held sequences went on", func() bool {
		return status("hold1") == queue.StatusCompleted && status("cancel1") == queue.StatusCompleted
	})
	if got := log.runs("hold"); got != "0@1 0@2 1@1" {
		t.Errorf("hold ran %s", got)
	}
	if got := log.runs("cancel"); got != "0@1 1@1" {
		t.Errorf("cancel ran %s", got)
	}
	if s := status("cancel0"); s != queue.StatusCancelled {
		t.Errorf("cancel0 is %s", s)
	}
	for _, k := range []string{"hold", "cancel", "free"} {
		b.sequential(t, k)
	}
}

// A worker killed while it runs a sequence's head (its lock session
// terminated): the head returns to pending, still the head, its attempt
// given back; it runs again, then the rest, in order, each once.
func TestSequenceKilledWorkerMidHead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for n := range 3 {
		b.enqueue(t, "step", seqStep{Key: "k", N: n}, queue.WithSequence("k"))
	}
	log := newSeqLog()
	started := make(chan struct{})
	var first atomic.Bool
	handlers := worker.Handlers{
		"step": func(ctx context.Context, task *worker.Task) error {
			var s seqStep
			_ = task.Decode(&s)
			log.begin(s, task.Attempt)
			defer log.end(s)
			if s.N == 0 && first.CompareAndSwap(false, true) {
				close(started)
				<-ctx.Done() // until its worker loses the task
				return ctx.Err()
			}
			return nil
		},
	}
	a, _ := start(t, pgtest.NewPool(t, b.schema), worker.Config{}, handlers)
	<-started
	start(t, pgtest.NewPool(t, b.schema), worker.Config{}, handlers)
	b.terminateLockSession(t, a)
	waitFor(t, 5*time.Second, "the sequence completed", func() bool {
		return b.count(t, "status = 'completed'") == 3
	})
	if got := log.runs("k"); got != "0@1 0@1 1@1 2@1" {
		t.Fatalf("runs %s", got)
	}
	b.sequential(t, "k")
	// Returned by the rescuer, or by its own worker once it saw its lock
	// session go: either way, to pending, at the head, attempt given back.
	head := b.get(t, b.firstOf(t, "k"))
	if len(head.Errors) != 1 || (head.Errors[0].Outcome != "rescued" && head.Errors[0].Outcome != "lock_lost") {
		t.Fatalf("head's history: %+v", head.Errors)
	}
}

func (b *bundle) firstOf(t *testing.T, key string) int64 {
	t.Helper()
	var id int64
	if err := b.pool.QueryRow(context.Background(), "SELECT min(id) FROM skiplock_tasks WHERE sequence_key = $1", key).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// The race between a producer and an outcome write: the head completes
// while a producer of its key holds the key's lock in an open transaction.
// The outcome write does not wait for the producer (the trigger only tries
// the lock) and so releases nothing; once the producer commits, the
// rescuer's pass releases the next task, and the sequence goes on in order.
func TestSequenceSweeperAfterProducerRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	k0 := b.enqueue(t, "step", seqStep{Key: "k", N: 0}, queue.WithSequence("k"))
	k1 := b.enqueue(t, "step", seqStep{Key: "k", N: 1}, queue.WithSequence("k"))

	log := newSeqLog()
	started, finish := make(chan struct{}), make(chan struct{})
	var passes atomic.Int64
	cfg := worker.Config{}
	worker.SetRescuePassed(&cfg, func() { passes.Add(1) })
	start(t, b.pool, cfg, worker.Handlers{
		"step": func(ctx context.Context, task *worker.Task) error {
			var s seqStep
			_ = task.Decode(&s)
			log.begin(s, task.Attempt)
			defer log.end(s)
			if s.N == 0 {
				close(started)
				<-finish
			}
			return nil
		},
	})
	<-started

	producer := pgtest.NewPool(t, b.schema)
	tx, err := producer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	k2, err := queue.New(producer).EnqueueTx(ctx, tx, "step", seqStep{Key: "k", N: 2}, queue.WithSequence("k"))
	if err != nil {
		t.Fatal(err)
	}

	close(finish)
	waitFor(t, 2*time.Second, "k0's completion, written while the producer holds the key", func() bool {
		return b.get(t, k0).Status == queue.StatusCompleted
	})
	from := passes.Load()
	waitFor(t, time.Second, "two rescue passes", func() bool { return passes.Load() >= from+2 })
	if s := b.get(t, k1).Status; s != queue.StatusWaiting {
		t.Fatalf("k1 is %s while the producer holds the key, want waiting", s)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the sweep released k1, and k2 followed", func() bool {
		return b.get(t, k2.ID).Status == queue.StatusCompleted
	})
	if got := log.runs("k"); got != "0@1 1@1 2@1" {
		t.Fatalf("runs %s", got)
	}
	b.sequential(t, "k")
}

// An outcome write never waits on a producer: checked in the database,
// with the producer's transaction open and its lock held, by completing
// the head in a statement that would block if the trigger waited.
func TestSequenceOutcomeWriteDoesNotWaitForProducer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	k0 := b.enqueue(t, "step", nil, queue.WithSequence("k"))
	k1 := b.enqueue(t, "step", nil, queue.WithSequence("k"))
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := b.client.EnqueueTx(ctx, tx, "step", nil, queue.WithSequence("k")); err != nil {
		t.Fatal(err)
	}
	// lock_timeout turns a wait into an error instead of a hang.
	err = pgx.BeginFunc(ctx, b.pool, func(w pgx.Tx) error {
		if _, err := w.Exec(ctx, "SET LOCAL lock_timeout = '5s'"); err != nil {
			return err
		}
		_, err := w.Exec(ctx, "UPDATE skiplock_tasks SET status = 'completed', finished_at = now() WHERE id = $1", k0)
		return err
	})
	if err != nil {
		t.Fatalf("completing the head while a producer holds the key: %v", err)
	}
	if s := b.get(t, k1).Status; s != queue.StatusWaiting {
		t.Fatalf("k1 is %s, want waiting (left to the sweep)", s)
	}
}
