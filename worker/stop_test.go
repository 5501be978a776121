package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TestStopAndCancel: a hard stop does not wait out the grace period. Every
// running handler's context is cancelled; tasks whose handlers then fail,
// or ignore the cancellation until abandoned, go back to pending with their
// attempt given back and their run time kept, and a second worker on
// another pool runs them as their first attempt; a handler that finishes
// its work anyway completes its task.
func TestStopAndCancel(t *testing.T) {
	t.Parallel()
	for _, mode := range []worker.Mode{worker.ModeAdvisory, worker.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			testStopAndCancel(t, mode)
		})
	}
}

func testStopAndCancel(t *testing.T, mode worker.Mode) {
	ctx := context.Background()
	b := setup(t)

	started := make(chan string, 10)
	release := make(chan struct{})
	defer close(release)
	handlers := worker.Handlers{
		"block": func(ctx context.Context, _ *worker.Task) error {
			started <- "block"
			<-ctx.Done()
			return ctx.Err()
		},
		"stubborn": func(ctx context.Context, _ *worker.Task) error {
			started <- "stubborn"
			<-release // ignores ctx
			return nil
		},
		"finisher": func(ctx context.Context, _ *worker.Task) error {
			started <- "finisher"
			<-ctx.Done()
			return nil // its work was done
		},
	}
	w, _ := start(t, pgtest.NewPool(t, b.schema), worker.Config{Mode: mode, ShutdownGrace: time.Hour, AbandonAfter: 200 * time.Millisecond}, handlers)

	var ids []int64
	for _, name := range []string{"block", "block", "block", "stubborn", "finisher"} {
		ids = append(ids, b.enqueue(t, name, nil, queue.WithMaxAttempts(1)))
	}
	for range ids {
		select {
		case <-started:
		case <-time.After(pgtest.Patient(time.Second)):
			t.Fatal("handlers did not start")
		}
	}

	// Graceful first: with an hour of grace, it does not return before its
	// context ends.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := w.Stop(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with handlers running and an hour of grace: %v, want the context's deadline", err)
	}
	patient, cancel := context.WithTimeout(ctx, pgtest.Patient(time.Second))
	defer cancel()
	if err := w.StopAndCancel(patient); err != nil {
		t.Fatalf("StopAndCancel: %v", err)
	}

	for i, id := range ids {
		task := b.get(t, id)
		if i == 4 {
			if task.Status != queue.StatusCompleted {
				t.Errorf("finisher: %s, want completed", task.Status)
			}
			continue
		}
		last := task.Errors[len(task.Errors)-1]
		if task.Status != queue.StatusPending || task.Attempt != 0 || last.Outcome != "shutdown" || task.RunAt.After(task.CreatedAt.Add(time.Second)) {
			t.Errorf("%s: %s, attempt %d of %d, last outcome %q, run at %s (created %s); want pending, attempt 0, shutdown, run time kept",
				task.Name, task.Status, task.Attempt, task.MaxAttempts, last.Outcome, task.RunAt, task.CreatedAt)
		}
	}
	if n := b.taskLocks(t); n != 0 {
		t.Errorf("%d task locks left after StopAndCancel", n)
	}

	// Another worker runs them: max attempts 1, and still their first.
	done := func(context.Context, *worker.Task) error { return nil }
	start(t, pgtest.NewPool(t, b.schema), worker.Config{Mode: mode}, worker.Handlers{"block": done, "stubborn": done, "finisher": done})
	waitFor(t, 2*time.Second, "the handed-back tasks completed elsewhere", func() bool {
		return b.count(t, "status = 'completed' AND attempt = 1") == len(ids)
	})
}

// TestStopGraceful: Stop lets running handlers finish and returns once Run
// has; a Stop before Run makes Run return at once, having run nothing.
func TestStopGraceful(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	started, release := make(chan struct{}, 1), make(chan struct{})
	w, _ := start(t, b.pool, worker.Config{}, worker.Handlers{"work": func(ctx context.Context, _ *worker.Task) error {
		started <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	id := b.enqueue(t, "work", nil)
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(ctx) }()
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if task := b.get(t, id); task.Status != queue.StatusCompleted || task.Attempt != 1 {
		t.Errorf("task %s after %d attempts, want completed after 1", task.Status, task.Attempt)
	}

	// Stopped before it runs.
	idle := worker.New(b.pool, testConfig(worker.Config{}))
	if err := idle.Stop(ctx); err != nil {
		t.Fatalf("Stop before Run: %v", err)
	}
	later := b.enqueue(t, "work", nil)
	if err := idle.Run(ctx, worker.Handlers{"work": func(context.Context, *worker.Task) error { return nil }}); err != nil {
		t.Fatalf("Run after Stop: %v", err)
	}
	if task := b.get(t, later); task.Status != queue.StatusPending || task.Attempt != 0 {
		t.Errorf("Run after Stop ran task %d: %s, attempt %d", later, task.Status, task.Attempt)
	}
}

// TestRunSignals runs worker.Run in a child process (this test binary): the
// first SIGINT starts a graceful shutdown, whose default grace (30s) the
// blocked handler would outlast; the second cancels it, and the process
// exits with its task handed back.
func TestRunSignals(t *testing.T) {
	if os.Getenv("SKIPLOCK_RUN_CHILD") != "" {
		err := worker.Run(worker.Handlers{"block": func(ctx context.Context, _ *worker.Task) error {
			<-ctx.Done()
			return ctx.Err()
		}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, "block", nil)

	cfg := b.pool.Config().ConnConfig
	url := fmt.Sprintf("postgres://%s@%s/%s?search_path=%s", cfg.User, net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), cfg.Database, b.schema)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunSignals$")
	cmd.Env = append(os.Environ(), "SKIPLOCK_RUN_CHILD=1", "DATABASE_URL="+url)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	waitFor(t, 5*time.Second, "the task running in the child", func() bool { return b.count(t, "status = 'running'") == 1 })
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// The graceful shutdown waits for the blocked handler: the process
	// lives on until the second signal.
	waitFor(t, time.Second, "the child's graceful shutdown", func() bool { return strings.Contains(stderr.String(), "shutting down; waiting for running tasks") })
	select {
	case err := <-exited:
		t.Fatalf("the child exited on the first signal, with the grace not over: %v\n%s", err, stderr.String())
	default:
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("child: %v\n%s", err, stderr.String())
		}
	case <-time.After(pgtest.Patient(5 * time.Second)):
		t.Fatal("the child did not exit after the second signal")
	}
	task := b.get(t, id)
	if task.Status != queue.StatusPending || task.Attempt != 0 || task.Errors[len(task.Errors)-1].Outcome != "shutdown" {
		t.Errorf("task %s, attempt %d, history %+v; want pending, 0, shutdown", task.Status, task.Attempt, task.Errors)
	}
}

func TestGracefulShutdownFinishesWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{}, 3)
	aClaims := &claims{}
	_, stop := start(t, b.pool, worker.Config{PollInterval: 20 * time.Millisecond, Observer: aClaims}, worker.Handlers{"work": func(ctx context.Context, task *worker.Task) error {
		started <- struct{}{}
		select {
		case <-time.After(300 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	for range 3 {
		b.enqueue(t, "work", nil)
	}
	for range 3 {
		<-started
	}
	stop() // returns after the handlers finished
	if n := b.count(t, "status = 'completed'"); n != 3 {
		t.Fatalf("%d of 3 in-flight tasks completed during graceful shutdown", n)
	}
	if n := b.taskLocks(t); n != 0 {
		t.Fatalf("%d locks left after shutdown", n)
	}
	// A stopped worker claims nothing: while another worker's claim loop,
	// polling as often, goes round five times, a claim loop of the stopped
	// one left running would have claimed.
	late := b.enqueue(t, "work", nil)
	stopped := aClaims.n.Load()
	other := &claims{}
	start(t, b.pool, worker.Config{Queues: []string{"elsewhere"}, PollInterval: 20 * time.Millisecond, Observer: other},
		worker.Handlers{"work": func(context.Context, *worker.Task) error { return nil }})
	waitClaims(t, 5, other)
	if n := aClaims.n.Load() - stopped; n != 0 {
		t.Fatalf("stopped worker made %d claims", n)
	}
	if s := b.get(t, late).Status; s != queue.StatusPending {
		t.Fatalf("task enqueued after shutdown is %s", s)
	}
}

func TestShutdownPastGraceReturnsTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := []int64{b.enqueue(t, "hang", nil, queue.WithMaxAttempts(1)), b.enqueue(t, "hang", nil, queue.WithMaxAttempts(1))}
	var running atomic.Int32
	_, stop := start(t, b.pool, worker.Config{ShutdownGrace: 200 * time.Millisecond}, worker.Handlers{"hang": func(ctx context.Context, task *worker.Task) error {
		running.Add(1)
		<-ctx.Done()
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}})
	waitFor(t, 10*time.Second, "both running", func() bool { return running.Load() == 2 })
	began := time.Now()
	stop()
	if d := time.Since(began); d < 200*time.Millisecond {
		t.Fatalf("shutdown took %s, less than its grace period", d)
	}
	for _, id := range ids {
		task := b.get(t, id)
		// Back in line, the attempt given back: with max attempts 1 the task
		// can still run.
		if task.Status != queue.StatusPending || task.Attempt != 0 || task.WorkerID != "" {
			t.Fatalf("task after shutdown = %+v", task)
		}
		if len(task.Errors) != 1 || task.Errors[0].Outcome != "shutdown" {
			t.Fatalf("errors = %+v", task.Errors)
		}
	}
	if n := b.taskLocks(t); n != 0 {
		t.Fatalf("%d locks left after shutdown", n)
	}
	// Another worker runs them to completion.
	start(t, b.pool, worker.Config{}, worker.Handlers{"hang": func(context.Context, *worker.Task) error { return nil }})
	waitFor(t, 10*time.Second, "rerun", func() bool { return b.count(t, "status = 'completed'") == 2 })
}
