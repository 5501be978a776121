package worker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// batchRuns records what a batch's tasks did, in order.
type batchRuns struct {
	mu     sync.Mutex
	events []string
	infos  map[string][]queue.BatchInfo // callback name -> what BatchInfo said, one per run
}

func (r *batchRuns) note(event string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event)
}

func (r *batchRuns) callback(name string) worker.Handler {
	return func(ctx context.Context, t *worker.Task) error {
		info, err := worker.BatchInfo(ctx)
		if err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, name)
		if r.infos == nil {
			r.infos = map[string][]queue.BatchInfo{}
		}
		r.infos[name] = append(r.infos[name], *info)
		return nil
	}
}

func (r *batchRuns) ran(name string) []queue.BatchInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]queue.BatchInfo(nil), r.infos[name]...)
}

// A batch whose members end every way: completed, failed for good after a
// retry, completed after a failed attempt, cancelled. OnFinish runs once,
// after every member has finished (the retrying member's failed attempt
// did not finish it), and reads the counts; OnSuccess is cancelled, with
// the counts in its history. A batch whose members all complete runs both.
func TestBatchCallbacks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	runs := &batchRuns{}
	var flaky sync.Map
	handlers := worker.Handlers{
		"ok": func(ctx context.Context, t *worker.Task) error {
			runs.note(fmt.Sprintf("ok %d", t.ID))
			return nil
		},
		"fail": func(ctx context.Context, t *worker.Task) error {
			runs.note(fmt.Sprintf("fail %d attempt %d", t.ID, t.Attempt))
			return errors.New("boom")
		},
		"flaky": func(ctx context.Context, t *worker.Task) error {
			runs.note(fmt.Sprintf("flaky %d attempt %d", t.ID, t.Attempt))
			if _, again := flaky.LoadOrStore(t.ID, true); !again {
				return errors.New("first attempt fails")
			}
			return nil
		},
		"finished":  runs.callback("finished"),
		"succeeded": runs.callback("succeeded"),
	}

	var mixed queue.Batch
	mixed.Name = "mixed"
	mixed.Add("ok", 1).Add("ok", 2).Add("fail", nil, queue.WithMaxAttempts(2)).Add("flaky", nil).Add("ok", 3, queue.WithDelay(time.Hour))
	mixed.OnFinish = queue.NewTask{Name: "finished"}
	mixed.OnSuccess = queue.NewTask{Name: "succeeded"}
	enq, err := b.client.EnqueueBatch(ctx, mixed)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.count(t, "status = 'waiting' AND batch_id = $1", enq.ID); got != 2 {
		t.Fatalf("%d callbacks waiting after enqueue, want 2", got)
	}
	_, stop := start(t, b.pool, worker.Config{}, handlers)
	waitFor(t, 5*time.Second, "four members finished", func() bool {
		return b.count(t, "batch_id = $1 AND status IN ('completed', 'failed')", enq.ID) == 4
	})
	// The delayed member has not finished: no callback yet.
	if got := b.count(t, "status = 'waiting' AND batch_id = $1", enq.ID); got != 2 {
		t.Fatalf("%d callbacks waiting with a member pending, want 2", got)
	}
	info, err := b.client.GetBatch(ctx, enq.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Completed != 3 || info.Failed != 1 || info.Cancelled != 0 || info.Total != 5 || info.FinishedAt != nil || info.Finished() {
		t.Fatalf("batch with one member pending: %+v", info)
	}
	if _, err := b.client.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{IDs: enq.TaskIDs[4:]}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the OnFinish callback", func() bool { return len(runs.ran("finished")) == 1 })
	stop()

	got := runs.ran("finished")[0]
	if got.ID != enq.ID || got.Total != 5 || got.Completed != 3 || got.Failed != 1 || got.Cancelled != 1 || got.FinishedAt == nil || got.Succeeded() {
		t.Errorf("OnFinish read %+v, want 3 completed, 1 failed, 1 cancelled of 5", got)
	}
	if n := len(runs.ran("succeeded")); n != 0 {
		t.Errorf("OnSuccess ran %d times with a member failed", n)
	}
	succ := b.get(t, enq.OnSuccessTaskID)
	if succ.Status != queue.StatusCancelled || len(succ.Errors) == 0 || succ.Errors[len(succ.Errors)-1].Outcome != "batch_failed" {
		t.Errorf("OnSuccess callback is %s with history %+v, want cancelled by batch_failed", succ.Status, succ.Errors)
	}
	runs.mu.Lock()
	if last := runs.events[len(runs.events)-1]; last != "finished" {
		t.Errorf("OnFinish was not the last to run: %v", runs.events)
	}
	runs.mu.Unlock()

	// Every member completes: both callbacks run, once each.
	var all queue.Batch
	all.Add("ok", 1).Add("flaky", nil).Add("ok", 2)
	all.OnFinish = queue.NewTask{Name: "finished", Payload: "second"}
	all.OnSuccess = queue.NewTask{Name: "succeeded"}
	enq2, err := b.client.EnqueueBatch(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	_, stop = start(t, b.pool, worker.Config{}, handlers)
	waitFor(t, 5*time.Second, "both callbacks of the second batch", func() bool {
		return len(runs.ran("finished")) == 2 && len(runs.ran("succeeded")) == 1
	})
	stop()
	if s := runs.ran("succeeded")[0]; s.ID != enq2.ID || !s.Succeeded() || s.Completed != 3 {
		t.Errorf("OnSuccess read %+v, want 3 of 3 completed", s)
	}
	if n := b.count(t, "batch_id = $1 AND status = 'completed'", enq2.ID); n != 5 {
		t.Errorf("%d tasks of the second batch completed, want 5", n)
	}
}

// A member requeued after its batch finished: the counts follow it, the
// OnFinish callback does not run again, and the OnSuccess callback that the
// failure cancelled runs once every member has completed.
func TestBatchRequeueAfterFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	runs := &batchRuns{}
	var healed sync.Map
	handlers := worker.Handlers{
		"ok": func(ctx context.Context, t *worker.Task) error { return nil },
		"fragile": func(ctx context.Context, t *worker.Task) error {
			if _, ok := healed.Load("yes"); ok {
				return nil
			}
			return worker.Permanent(errors.New("broken until healed"))
		},
		"finished":  runs.callback("finished"),
		"succeeded": runs.callback("succeeded"),
	}
	batch := queue.Batch{OnFinish: queue.NewTask{Name: "finished"}, OnSuccess: queue.NewTask{Name: "succeeded"}}
	batch.Add("ok", nil).Add("fragile", nil)
	enq, err := b.client.EnqueueBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	_, stop := start(t, b.pool, worker.Config{}, handlers)
	defer stop()
	waitFor(t, 5*time.Second, "OnFinish", func() bool { return len(runs.ran("finished")) == 1 })
	waitFor(t, 5*time.Second, "OnSuccess cancelled", func() bool { return b.get(t, enq.OnSuccessTaskID).Status == queue.StatusCancelled })

	healed.Store("yes", true)
	if _, err := b.client.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{IDs: enq.TaskIDs[1:]}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "OnSuccess after the requeue", func() bool { return len(runs.ran("succeeded")) == 1 })
	info, err := b.client.GetBatch(ctx, enq.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Completed != 2 || info.Failed != 0 || !info.Succeeded() || info.FinishedAt == nil {
		t.Errorf("batch after the requeue: %+v, want 2 of 2 completed", info)
	}
	// Give a second OnFinish every chance to show itself: the worker has
	// nothing else to do, and the callback is completed, not pending. Its
	// handler has returned, but the worker may not have written its
	// outcome yet (outcomes are written in groups).
	waitFor(t, time.Second, "OnFinish completed", func() bool { return b.get(t, enq.OnFinishTaskID).Status == queue.StatusCompleted })
	if f := b.get(t, enq.OnFinishTaskID); f.Attempt != 1 {
		t.Errorf("OnFinish is %s after %d attempts, want completed after 1", f.Status, f.Attempt)
	}
	if n := len(runs.ran("finished")); n != 1 {
		t.Errorf("OnFinish ran %d times, want once", n)
	}
}

// Members deleted before they finish count as cancelled, so the batch
// still finishes; members deleted after they finish keep their count.
func TestBatchDeletedMembers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	batch := queue.Batch{OnFinish: queue.NewTask{Name: "finished"}}
	batch.Add("a", nil).Add("b", nil).Add("c", nil)
	enq, err := b.client.EnqueueBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, "UPDATE skiplock_tasks SET status = 'completed', finished_at = now() WHERE id = $1", enq.TaskIDs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Delete(ctx, enq.TaskIDs[:2]); err != nil {
		t.Fatal(err)
	}
	info, err := b.client.GetBatch(ctx, enq.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Completed != 1 || info.Cancelled != 1 || info.Unfinished() != 1 {
		t.Fatalf("after deleting a completed and a pending member: %+v", info)
	}
	if _, err := b.client.Delete(ctx, enq.TaskIDs[2:]); err != nil {
		t.Fatal(err)
	}
	if got := b.get(t, enq.OnFinishTaskID).Status; got != queue.StatusPending {
		t.Errorf("OnFinish is %s once every member is gone, want pending", got)
	}
}

// Two members of a batch finish at the same instant, in two transactions:
// each write counts in the batch's row under its lock, so the second sees
// the first's count, and exactly one of them releases the callback.
func TestBatchConcurrentFinishers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for round := range 20 {
		batch := queue.Batch{OnFinish: queue.NewTask{Name: "finished"}, OnSuccess: queue.NewTask{Name: "succeeded"}}
		batch.Add("m", nil).Add("m", nil)
		enq, err := b.client.EnqueueBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		txs := make([]interface {
			Commit(context.Context) error
		}, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for i := range 2 {
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			txs[i] = tx
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if _, err := tx.Exec(ctx, "UPDATE skiplock_tasks SET status = 'completed', finished_at = now() WHERE id = $1", enq.TaskIDs[i]); err != nil {
					errs <- err
					return
				}
				errs <- tx.Commit(ctx)
			}()
		}
		close(start)
		wg.Wait()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if got := b.count(t, "batch_id = $1 AND status = 'pending'", enq.ID); got != 2 {
			t.Fatalf("round %d: %d callbacks pending, want 2 (OnFinish and OnSuccess)", round, got)
		}
		info, err := b.client.GetBatch(ctx, enq.ID)
		if err != nil {
			t.Fatal(err)
		}
		if info.Completed != 2 || info.FinishedAt == nil {
			t.Fatalf("round %d: %+v", round, info)
		}
	}

	// The same, held open: the second finisher waits for the first's
	// commit, then counts on top of it.
	batch := queue.Batch{OnFinish: queue.NewTask{Name: "finished"}}
	batch.Add("m", nil).Add("m", nil)
	enq, err := b.client.EnqueueBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	first, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if _, err := first.Exec(ctx, "UPDATE skiplock_tasks SET status = 'failed', finished_at = now() WHERE id = $1", enq.TaskIDs[0]); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := b.pool.Exec(ctx, "UPDATE skiplock_tasks SET status = 'completed', finished_at = now() WHERE id = $1", enq.TaskIDs[1])
		second <- err
	}()
	waitFor(t, 5*time.Second, "the second finisher waiting for the batch's row", func() bool {
		var waiting bool
		if err := b.pool.QueryRow(ctx, "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE skiplock_tasks SET status = ''completed''%'").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	if got := b.count(t, "batch_id = $1 AND status = 'waiting'", enq.ID); got != 1 {
		t.Fatalf("callback released before either finisher committed")
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	info, err := b.client.GetBatch(ctx, enq.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Completed != 1 || info.Failed != 1 || info.FinishedAt == nil || b.get(t, enq.OnFinishTaskID).Status != queue.StatusPending {
		t.Errorf("after both finishers: %+v, OnFinish %s", info, b.get(t, enq.OnFinishTaskID).Status)
	}
}

// batchChildEnv names the test schema to a child worker process of
// TestBatchAcrossProcesses.
const batchChildEnv = "SKIPLOCK_BATCH_CHILD"

// batchChild is a worker process of TestBatchAcrossProcesses: it runs the
// members, which wait at a barrier (a row in batch_go) so that they finish
// together, and the callback, which records its run in batch_calls. It
// stops when its stdin closes.
func batchChild() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
		cancel()
	}()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	handlers := worker.Handlers{
		"member": func(ctx context.Context, t *worker.Task) error {
			for {
				var open bool
				if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM batch_go WHERE batch_id = (SELECT batch_id FROM skiplock_tasks WHERE id = $1))", t.ID).Scan(&open); err != nil {
					return err
				}
				if open {
					return nil
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(2 * time.Millisecond):
				}
			}
		},
		"done": func(ctx context.Context, t *worker.Task) error {
			info, err := worker.BatchInfo(ctx)
			if err != nil {
				return err
			}
			_, err = pool.Exec(ctx, "INSERT INTO batch_calls (batch_id, completed, pid) VALUES ($1, $2, $3)", info.ID, info.Completed, os.Getpid())
			return err
		},
	}
	err = worker.New(pool, testConfig(worker.Config{Concurrency: 4})).Run(ctx, handlers)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Batches whose members run on two worker processes and finish at the
// same instant (a barrier releases them together, each process holding
// half): the callback runs exactly once per batch, and reads every member
// completed.
func TestBatchAcrossProcesses(t *testing.T) {
	if os.Getenv(batchChildEnv) != "" {
		batchChild()
	}
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for _, q := range []string{
		"CREATE TABLE batch_go (batch_id bigint PRIMARY KEY)",
		"CREATE TABLE batch_calls (batch_id bigint, completed integer, pid integer)",
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	cfg := b.pool.Config().ConnConfig
	url := fmt.Sprintf("postgres://%s@%s/%s?search_path=%s", cfg.User, net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), cfg.Database, b.schema)
	var pids []int
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBatchAcrossProcesses$")
		cmd.Env = append(os.Environ(), batchChildEnv+"=1", "DATABASE_URL="+url)
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			stdin.Close()
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("child %d: %v\n%s", cmd.Process.Pid, err, stderr.String())
				}
			case <-time.After(pgtest.Patient(30 * time.Second)):
				_ = cmd.Process.Kill()
				t.Errorf("child %d did not stop\n%s", cmd.Process.Pid, stderr.String())
			}
		})
	}
	waitFor(t, 10*time.Second, "two worker processes", func() bool {
		var n int
		if err := b.pool.QueryRow(ctx, "SELECT count(DISTINCT pid) FROM skiplock_workers").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2
	})

	const rounds, members = 5, 8 // each process holds 4 at once
	for round := range rounds {
		var batch queue.Batch
		for range members {
			batch.Add("member", nil)
		}
		batch.OnFinish = queue.NewTask{Name: "done"}
		enq, err := b.client.EnqueueBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "every member running, on both processes", func() bool {
			var running, hosts int
			if err := b.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT w.pid) FROM skiplock_tasks AS t JOIN skiplock_workers AS w ON w.id = t.worker_id
				WHERE t.batch_id = $1 AND t.status = 'running'`, enq.ID).Scan(&running, &hosts); err != nil {
				t.Fatal(err)
			}
			return running == members && hosts == 2
		})
		if _, err := b.pool.Exec(ctx, "INSERT INTO batch_go VALUES ($1)", enq.ID); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the callback", func() bool {
			return b.get(t, enq.OnFinishTaskID).Status == queue.StatusCompleted
		})
		var calls, completed int
		if err := b.pool.QueryRow(ctx, "SELECT count(*), coalesce(min(completed), 0) FROM batch_calls WHERE batch_id = $1", enq.ID).Scan(&calls, &completed); err != nil {
			t.Fatal(err)
		}
		if calls != 1 || completed != members {
			t.Fatalf("round %d: the callback ran %d times, reading %d completed; want once, %d", round, calls, completed, members)
		}
	}
	var where []string
	rows, err := b.pool.Query(ctx, "SELECT DISTINCT pid::text FROM batch_calls")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		where = append(where, p)
	}
	t.Logf("children %v; callbacks ran on %v", pids, where)
}
