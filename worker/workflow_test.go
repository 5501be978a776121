package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// A fan-out, fan-in workflow run by two workers, each on its own pool: no
// step starts before the steps it depends on have completed, and the
// fan-in step reads every output of the fan-out.
func TestWorkflowFanOutFanIn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	const width = 8
	wf := queue.Workflow{Name: "thumbnails", Steps: []queue.Step{{Name: "fetch", Payload: "cat.png"}}}
	var sizes []string
	for i := range width {
		name := fmt.Sprintf("resize-%d", i)
		sizes = append(sizes, name)
		wf.Steps = append(wf.Steps, queue.Step{Name: name, Task: "resize", Payload: 32 << i, DependsOn: []string{"fetch"}})
	}
	wf.Steps = append(wf.Steps, queue.Step{Name: "publish", DependsOn: sizes})
	enq, err := b.client.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.count(t, "status = 'waiting'"); got != width+1 {
		t.Fatalf("%d tasks waiting after enqueue, want %d", got, width+1)
	}

	var mu sync.Mutex
	ran := map[string][]string{} // worker -> steps, for the log
	published := make(chan []string, 1)
	handlers := func(who string) worker.Handlers {
		note := func(t *worker.Task) {
			mu.Lock()
			ran[who] = append(ran[who], t.Name)
			mu.Unlock()
		}
		return worker.Handlers{
			"fetch": worker.Returning(func(ctx context.Context, t *worker.Task) (string, error) {
				note(t)
				return "/tmp/cat.png", nil
			}),
			"resize": worker.Returning(func(ctx context.Context, t *worker.Task) (string, error) {
				note(t)
				var src string
				if err := worker.DependencyOutput(ctx, "fetch", &src); err != nil {
					return "", err
				}
				return fmt.Sprintf("%s@%s", src, t.Payload), nil
			}),
			"publish": func(ctx context.Context, t *worker.Task) error {
				note(t)
				deps, err := worker.DependencyOutputs(ctx)
				if err != nil {
					return err
				}
				var outs []string
				for _, d := range deps {
					var s string
					if err := d.Decode(&s); err != nil {
						return err
					}
					outs = append(outs, d.Step+"="+s)
				}
				published <- outs
				return nil
			},
		}
	}
	start(t, pgtest.NewPool(t, b.schema), worker.Config{}, handlers("A"))
	start(t, pgtest.NewPool(t, b.schema), worker.Config{}, handlers("B"))

	var outs []string
	select {
	case outs = <-published:
	case <-time.After(pgtest.Patient(20 * time.Second)):
		t.Fatalf("publish did not run; tasks: %s", b.breakdown(t))
	}
	if len(outs) != width {
		t.Fatalf("publish read %d outputs, want %d: %v", len(outs), width, outs)
	}
	for i, o := range outs {
		if want := fmt.Sprintf("resize-%d=/tmp/cat.png@%d", i, 32<<i); o != want {
			t.Errorf("output %d = %q, want %q", i, o, want)
		}
	}
	waitFor(t, 2*time.Second, "the workflow completed", func() bool { return b.count(t, "status = 'completed'") == width+2 })
	// No task started before its dependencies finished.
	if n := b.count(t, `EXISTS (SELECT 1 FROM skiplock_tasks AS p
		WHERE p.id = ANY(skiplock_tasks.depends_on) AND p.finished_at > skiplock_tasks.started_at)`); n != 0 {
		t.Fatalf("%d tasks started before a dependency finished", n)
	}
	info, err := b.client.GetWorkflow(ctx, enq.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "thumbnails" || len(info.Tasks) != width+2 || info.Steps[enq.TaskIDs["publish"]] != "publish" {
		t.Fatalf("GetWorkflow = %+v", info)
	}
	t.Logf("steps run by each worker: %v", ran)
}

// wfBundle runs a workflow test's handlers: each task name fails while
// fail[name] is set.
type failSwitch struct {
	mu   sync.Mutex
	fail map[string]bool
}

func (f *failSwitch) set(name string, v bool) {
	f.mu.Lock()
	f.fail[name] = v
	f.mu.Unlock()
}

func (f *failSwitch) handlers(names ...string) worker.Handlers {
	h := worker.Handlers{}
	for _, n := range names {
		h[n] = func(ctx context.Context, t *worker.Task) error {
			f.mu.Lock()
			fail := f.fail[t.Name]
			f.mu.Unlock()
			if fail {
				return worker.Permanent(errors.New("broken"))
			}
			return worker.SetOutput(ctx, t.Name)
		}
	}
	return h
}

// A dependency that fails for good cancels its waiting dependents, and
// theirs, with the reason; one that asked to wait waits. Requeueing the
// failed task lets the workflow go on to the end.
func TestWorkflowDependencyFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sw := &failSwitch{fail: map[string]bool{"b": true}}
	start(t, b.pool, worker.Config{}, sw.handlers("a", "b", "c", "d", "e"))

	// a -> b -> c -> d, and e waits for b whatever happens.
	enq, err := b.client.EnqueueWorkflow(ctx, queue.Workflow{Steps: []queue.Step{
		{Name: "a"},
		{Name: "b", DependsOn: []string{"a"}},
		{Name: "c", DependsOn: []string{"b"}},
		{Name: "d", DependsOn: []string{"c"}},
		{Name: "e", DependsOn: []string{"b"}, Options: []queue.Option{queue.WithDependencyFailure(queue.DependencyFailureWait)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := enq.TaskIDs
	waitFor(t, 5*time.Second, "b failed and d cancelled", func() bool {
		return b.get(t, id["b"]).Status == queue.StatusFailed && b.get(t, id["d"]).Status == queue.StatusCancelled
	})
	c := b.get(t, id["c"])
	if c.Status != queue.StatusCancelled || c.Errors[0].Outcome != "dependency_failed" ||
		c.Errors[0].Error != fmt.Sprintf("dependency %d (b) failed for good", id["b"]) {
		t.Fatalf("c: %s %+v", c.Status, c.Errors)
	}
	if d := b.get(t, id["d"]); d.Errors[0].Error != fmt.Sprintf("dependency %d (c) was cancelled", id["c"]) {
		t.Fatalf("d: %+v", d.Errors)
	}
	if e := b.get(t, id["e"]); e.Status != queue.StatusWaiting || e.WaitingFor != 1 {
		t.Fatalf("e: %s waiting for %d", e.Status, e.WaitingFor)
	}

	sw.set("b", false)
	if _, err := b.client.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{IDs: []int64{id["b"]}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the workflow completed after the requeue", func() bool {
		return b.count(t, "status = 'completed'") == 5
	})
	d := b.get(t, id["d"])
	if last := d.Errors[len(d.Errors)-1]; last.Outcome != "requeued" || !strings.Contains(last.Error, "was requeued") {
		t.Fatalf("d's history: %+v", d.Errors)
	}
}

// Cancelling a waiting task cancels its dependents; deleting a dependency
// that never completed cancels them too; WithDependsOn on a task that
// already failed cancels the new task at once, and on one that completed
// makes it pending.
func TestWorkflowCancelAndDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// No worker: every change here is an operator's or a producer's.
	root := b.enqueue(t, "root", nil)
	mid, err := b.client.Enqueue(ctx, "mid", nil, queue.WithDependsOn(root))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := b.client.Enqueue(ctx, "leaf", nil, queue.WithDependsOn(mid.ID, root))
	if err != nil {
		t.Fatal(err)
	}
	if s := b.get(t, leaf.ID); s.Status != queue.StatusWaiting || s.WaitingFor != 2 || s.WorkflowID == 0 || s.WorkflowID != b.get(t, root).WorkflowID {
		t.Fatalf("leaf: %+v", s)
	}
	if _, err := b.client.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{IDs: []int64{mid.ID}}}); err != nil {
		t.Fatal(err)
	}
	if s := b.get(t, leaf.ID); s.Status != queue.StatusCancelled || s.Errors[0].Outcome != "dependency_cancelled" {
		t.Fatalf("leaf after cancelling mid: %s %+v", s.Status, s.Errors)
	}

	other, err := b.client.Enqueue(ctx, "other", nil, queue.WithDependsOn(root))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Delete(ctx, []int64{root}); err != nil {
		t.Fatal(err)
	}
	if s := b.get(t, other.ID); s.Status != queue.StatusCancelled || s.Errors[0].Outcome != "dependency_deleted" {
		t.Fatalf("other after deleting root: %s %+v", s.Status, s.Errors)
	}

	failed := pgtest.InsertTask(t, b.pool, "default", "x", "failed", 1, 1, "[]")
	done := pgtest.InsertTask(t, b.pool, "default", "y", "completed", 1, 1, "[]")
	late, err := b.client.Enqueue(ctx, "late", nil, queue.WithDependsOn(failed, done))
	if err != nil {
		t.Fatal(err)
	}
	if s := b.get(t, late.ID); s.Status != queue.StatusCancelled || !strings.Contains(s.Errors[0].Error, "failed for good") {
		t.Fatalf("late: %s %+v", s.Status, s.Errors)
	}
	ready, err := b.client.Enqueue(ctx, "ready", nil, queue.WithDependsOn(done))
	if err != nil {
		t.Fatal(err)
	}
	if s := b.get(t, ready.ID); s.Status != queue.StatusPending {
		t.Fatalf("ready: %s", s.Status)
	}
	if _, err := b.client.Enqueue(ctx, "keyed", nil, queue.WithDependsOn(done), queue.WithUniqueKey("k")); !errors.Is(err, queue.ErrInvalidTask) {
		t.Fatalf("WithDependsOn and a unique key: %v", err)
	}
	if _, err := b.client.Enqueue(ctx, "keyed", nil, queue.WithDependsOn(done), queue.WithUniqueKey("k"), queue.WithUniqueWindow(time.Hour)); err != nil {
		t.Fatalf("WithDependsOn and a windowed unique key: %v", err)
	}
	if res, err := b.client.Enqueue(ctx, "keyed", nil, queue.WithDependsOn(done), queue.WithUniqueKey("k"), queue.WithUniqueWindow(time.Hour)); err != nil || !res.Duplicate || res.ID == 0 {
		t.Fatalf("a second windowed duplicate: %+v %v", res, err)
	}
	if res, err := b.client.Enqueue(ctx, "keyed", nil, queue.WithDependsOn(done), queue.WithUniqueKey("k"), queue.WithUniqueWindow(time.Hour),
		queue.WithDuplicateError()); !errors.Is(err, queue.ErrDuplicate) || !res.Duplicate || res.ID == 0 {
		t.Fatalf("a third windowed duplicate, WithDuplicateError: %+v %v", res, err)
	}
	if _, err := b.client.Enqueue(ctx, "orphan", nil, queue.WithDependsOn(999999)); !errors.Is(err, queue.ErrInvalidTask) ||
		!strings.Contains(err.Error(), "do not exist: 999999") {
		t.Fatalf("depending on a missing task: %v", err)
	}
}

// A workflow whose steps set no queue of their own runs to completion on a
// worker that claims only the queue named in Workflow.Options: no step
// is left behind in the default queue.
func TestWorkflowOptionsQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	var mu sync.Mutex
	seen := map[string]string{} // step -> the queue its handler ran from
	h := func(ctx context.Context, t *worker.Task) error {
		mu.Lock()
		seen[t.Name] = t.Queue
		mu.Unlock()
		return worker.SetOutput(ctx, t.Name)
	}
	start(t, b.pool, worker.Config{Queues: []string{"media"}}, worker.Handlers{"fetch": h, "resize": h, "publish": h})

	enq, err := b.client.EnqueueWorkflow(ctx, queue.Workflow{
		Name:    "thumbnails",
		Options: []queue.Option{queue.WithQueue("media"), queue.WithMaxAttempts(2)},
		Steps: []queue.Step{
			{Name: "fetch"},
			{Name: "small", Task: "resize", Payload: 64, DependsOn: []string{"fetch"}},
			{Name: "large", Task: "resize", Payload: 512, DependsOn: []string{"fetch"}},
			{Name: "publish", DependsOn: []string{"small", "large"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the workflow completed", func() bool {
		return b.count(t, "status = 'completed' AND workflow_id = $1", enq.ID) == 4
	})
	if n := b.count(t, "queue <> 'media' OR max_attempts <> 2"); n != 0 {
		t.Fatalf("%d tasks outside the workflow's options; tasks: %s", n, b.breakdown(t))
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["fetch"] != "media" || seen["resize"] != "media" || seen["publish"] != "media" {
		t.Fatalf("queues the handlers ran from: %v", seen)
	}
}

func TestWorkflowInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for _, tc := range []struct {
		wf   queue.Workflow
		want string
	}{
		{queue.Workflow{}, "no steps"},
		{queue.Workflow{Steps: []queue.Step{{Name: "a"}, {Name: "a"}}}, `two steps are named "a"`},
		{queue.Workflow{Steps: []queue.Step{{Name: "a", DependsOn: []string{"z"}}}}, `step "a" depends on "z", which is not a step`},
		{queue.Workflow{Steps: []queue.Step{{Name: "a", DependsOn: []string{"c"}}, {Name: "b", DependsOn: []string{"a"}}, {Name: "c", DependsOn: []string{"b"}}, {Name: "d"}}},
			"dependencies form a cycle among steps a, b, c"},
		{queue.Workflow{Steps: []queue.Step{{Name: "a", Options: []queue.Option{queue.WithUniqueKey("k")}}}}, "unique keys and WithDependsOn do not apply"},
	} {
		_, err := b.client.EnqueueWorkflow(ctx, tc.wf)
		if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.wf, err, tc.want)
		}
	}
	if n := b.count(t, "true"); n != 0 {
		t.Fatalf("%d tasks inserted by invalid workflows", n)
	}
}

// The race a release in the outcome write's own snapshot would lose: a
// dependent is enqueued, in a transaction that locks its running
// dependency, while the dependency's outcome write waits for that lock.
// The write goes on after the commit, and must see the new dependent.
func TestWorkflowDependentEnqueuedDuringCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	release := make(chan struct{})
	dependentRan := make(chan struct{})
	start(t, b.pool, worker.Config{}, worker.Handlers{
		"first": func(ctx context.Context, t *worker.Task) error { <-release; return nil },
		"then":  func(ctx context.Context, t *worker.Task) error { close(dependentRan); return nil },
	})
	first := b.enqueue(t, "first", nil)
	waitFor(t, 5*time.Second, "first running", func() bool { return b.get(t, first).Status == queue.StatusRunning })

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	then, err := b.client.EnqueueTx(ctx, tx, "then", nil, queue.WithDependsOn(first))
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFor(t, 5*time.Second, "the outcome write waiting for the producer's lock", func() bool {
		return b.count(t, `EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ~ 'Task(Finish|Complete)Many')`) > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dependentRan:
	case <-time.After(pgtest.Patient(10 * time.Second)):
		t.Fatalf("the dependent never ran: %+v", b.get(t, then.ID))
	}
}

// A worker killed between its completion and the release of the task's
// dependents: the release runs in the completion's own statement (the
// trigger), so there is no such moment to lose. The test makes the moment
// as close as it gets: the outcome write is held inside the release (a lock
// on the dependent's row), and then the worker's connections are killed,
// the one writing and its lock session. The completion was not committed:
// the task is still running (or already rescued, pending) and its
// dependent still waiting. Once the lock is let go the worker recovers
// (its write is retried, or the task is rescued and run again), and the
// dependent runs, once.
func TestWorkflowKilledBetweenCompletionAndRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	enq, err := b.client.EnqueueWorkflow(ctx, queue.Workflow{Steps: []queue.Step{
		{Name: "first"}, {Name: "then", DependsOn: []string{"first"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	first, then := enq.TaskIDs["first"], enq.TaskIDs["then"]
	conn, err := pgx.ConnectConfig(ctx, pgtest.Config(t, b.schema).ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	hold := pgtest.HoldTaskRow(t, conn, then)

	var thenRuns atomic.Int64
	a, _ := start(t, pgtest.NewPool(t, b.schema), worker.Config{}, worker.Handlers{
		"first": func(ctx context.Context, t *worker.Task) error { return nil },
		"then":  func(ctx context.Context, t *worker.Task) error { thenRuns.Add(1); return nil },
	})
	var pid int32
	waitFor(t, 5*time.Second, "the outcome write blocked inside the release", func() bool {
		return b.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query ~ 'Task(Finish|Complete)Many'`).Scan(&pid) == nil
	})
	if _, err := b.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	b.terminateLockSession(t, a)
	// No completion of the first task can commit while the lock is held.
	// The rescuer may already have returned it to the queue (its lock went
	// with the session, and the retried outcome write waits out a backoff
	// before it blocks again), which is not half done either.
	if s1, s2 := b.get(t, first).Status, b.get(t, then).Status; (s1 != queue.StatusRunning && s1 != queue.StatusPending) || s2 != queue.StatusWaiting {
		t.Fatalf("after the kill: first %s, then %s; want running or pending, and waiting (nothing half done)", s1, s2)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "both tasks completed", func() bool {
		return b.get(t, first).Status == queue.StatusCompleted && b.get(t, then).Status == queue.StatusCompleted
	})
	if n := thenRuns.Load(); n != 1 {
		t.Fatalf("the dependent ran %d times", n)
	}
	task := b.get(t, first)
	t.Logf("first completed on attempt %d, history %+v", task.Attempt, task.Errors)
}

// Many fan-ins that share their dependencies' outcome writes, run by two
// workers: batches of completions release dependents in every order, and
// two batches can wait for each other's dependents (a deadlock PostgreSQL
// breaks by aborting one; the completer writes it again). Every task
// completes, each once, none before its dependencies.
func TestWorkflowManyFanIns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const workflows, width = 10, 40
	for w := range workflows {
		wf := queue.Workflow{Name: fmt.Sprint("wf", w)}
		var leaves []string
		for i := range width {
			leaves = append(leaves, fmt.Sprint("leaf", i))
			wf.Steps = append(wf.Steps, queue.Step{Name: fmt.Sprint("leaf", i), Task: "leaf"})
		}
		// Two fan-ins over the same leaves, in opposite orders.
		wf.Steps = append(wf.Steps, queue.Step{Name: "in1", Task: "in", DependsOn: leaves})
		slices.Reverse(leaves)
		wf.Steps = append(wf.Steps, queue.Step{Name: "in2", Task: "in", DependsOn: leaves})
		wf.Steps = append(wf.Steps, queue.Step{Name: "end", DependsOn: []string{"in1", "in2"}})
		if _, err := b.client.EnqueueWorkflow(ctx, wf); err != nil {
			t.Fatal(err)
		}
	}
	var runs sync.Map
	h := func(ctx context.Context, t *worker.Task) error {
		n, _ := runs.LoadOrStore(t.ID, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		return nil
	}
	handlers := worker.Handlers{"leaf": h, "in": h, "end": h}
	start(t, pgtest.NewPool(t, b.schema), worker.Config{}, handlers)
	start(t, pgtest.NewPool(t, b.schema), worker.Config{}, handlers)
	total := workflows * (width + 3)
	waitFor(t, 20*time.Second, "every task completed", func() bool { return b.count(t, "status = 'completed'") == total })
	runs.Range(func(id, n any) bool {
		if c := n.(*atomic.Int64).Load(); c != 1 {
			t.Errorf("task %d ran %d times", id, c)
		}
		return true
	})
	if n := b.count(t, `EXISTS (SELECT 1 FROM skiplock_tasks AS p
		WHERE p.id = ANY(skiplock_tasks.depends_on) AND p.finished_at > skiplock_tasks.started_at)`); n != 0 {
		t.Fatalf("%d tasks started before a dependency finished", n)
	}
	if n := b.count(t, "deps_pending <> 0"); n != 0 {
		t.Fatalf("%d tasks still count unfinished dependencies", n)
	}
}

// A chain a thousand tasks long is cancelled from its head and put back by
// a requeue: the cascade walks it level by level (migration 8's recursion
// ran out of PostgreSQL's stack here).
func TestWorkflowLongChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const n = 1000
	wf := queue.Workflow{Steps: []queue.Step{{Name: "s0", Task: "step"}}}
	for i := 1; i < n; i++ {
		wf.Steps = append(wf.Steps, queue.Step{Name: fmt.Sprint("s", i), Task: "step", DependsOn: []string{fmt.Sprint("s", i-1)}})
	}
	enq, err := b.client.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	head := enq.TaskIDs["s0"]
	if _, err := b.client.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{IDs: []int64{head}}}); err != nil {
		t.Fatal(err)
	}
	if got := b.count(t, "status = 'cancelled'"); got != n {
		t.Fatalf("%d of %d tasks cancelled", got, n)
	}
	last := b.get(t, enq.TaskIDs[fmt.Sprint("s", n-1)])
	if want := fmt.Sprintf("dependency %d (step) was cancelled", enq.TaskIDs[fmt.Sprint("s", n-2)]); last.Errors[0].Error != want {
		t.Fatalf("the last task's reason: %q, want %q", last.Errors[0].Error, want)
	}
	if _, err := b.client.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{IDs: []int64{head}, Statuses: []queue.Status{queue.StatusCancelled}}}); err != nil {
		t.Fatal(err)
	}
	if got := b.count(t, "status = 'waiting'"); got != n-1 {
		t.Fatalf("%d of %d tasks waiting again after the requeue", got, n-1)
	}
}
