package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TestPoisonTaskQuarantined: a task whose handler kills its own process
// (SIGKILL, as the kernel's OOM killer does), in a queue with 20 innocent
// tasks, under a supervisor that starts the worker process again each time
// it dies. The poison task takes down at most MaxCrashes (3) processes and
// is failed, its error naming the three deaths' workers, hosts and pids;
// every innocent task completes, with no attempt charged for the processes
// that died under it (attempt 1).
func TestPoisonTaskQuarantined(t *testing.T) {
	if os.Getenv("SKIPLOCK_POISON_CHILD") != "" {
		poisonChild()
		return
	}
	t.Parallel()
	for _, mode := range []string{"advisory", "lease"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testPoison(t, mode)
		})
	}
}

func testPoison(t *testing.T, mode string) {
	b := setup(t)
	ctx := context.Background()
	cfg := b.pool.Config().ConnConfig
	url := fmt.Sprintf("postgres://%s@%s/%s?search_path=%s", cfg.User, net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), cfg.Database, b.schema)

	// The poison task is third in line: the first claim of 4 takes it
	// with innocent tasks beside it.
	var innocent []int64
	for range 2 {
		innocent = append(innocent, b.enqueue(t, "innocent", nil))
	}
	poison := b.enqueue(t, "poison", nil)
	for range 18 {
		innocent = append(innocent, b.enqueue(t, "innocent", nil))
	}

	type death struct {
		id  string
		pid int
	}
	var deaths []death
	var logs []*syncBuffer
	done := func() bool {
		if b.get(t, poison).Status != queue.StatusFailed {
			return false
		}
		for _, id := range innocent {
			if b.get(t, id).Status != queue.StatusCompleted {
				return false
			}
		}
		return true
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range logs {
				t.Logf("child-%d's log:\n%s", i, l.String())
			}
		}
	})
	deadline := time.Now().Add(pgtest.Patient(3 * time.Minute))
	for i := 0; ; i++ {
		if i > 10 {
			t.Fatalf("the supervisor started %d processes; deaths: %v", i, deaths)
		}
		id := fmt.Sprintf("%s-child-%d", mode, i)
		cmd := exec.Command(os.Args[0], "-test.run=^TestPoisonTaskQuarantined$")
		cmd.Env = append(os.Environ(), "SKIPLOCK_POISON_CHILD=1", "SKIPLOCK_POISON_MODE="+mode, "DATABASE_URL="+url, "SKIPLOCK_CHILD_ID="+id)
		stderr := &syncBuffer{}
		logs = append(logs, stderr)
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var err error
		finished := false
	watch:
		for {
			select {
			case err = <-exited:
				break watch
			case <-time.After(100 * time.Millisecond):
				if done() {
					finished = true
					cmd.Process.Kill()
					<-exited
					break watch
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					<-exited
					t.Fatalf("not done within the deadline; deaths: %v; poison task: %+v", deaths, b.get(t, poison))
				}
			}
		}
		if finished {
			break
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("child %s ended other than by SIGKILL: %v\n%s", id, err, stderr.String())
		}
		deaths = append(deaths, death{id: id, pid: cmd.Process.Pid})
	}

	const maxCrashes = 3 // Config.MaxCrashes' default
	if len(deaths) > maxCrashes {
		t.Errorf("%d worker processes died, want at most MaxCrashes (%d)", len(deaths), maxCrashes)
	}
	p := b.get(t, poison)
	last := p.Errors[len(p.Errors)-1]
	defer func() {
		if t.Failed() {
			for i, e := range p.Errors {
				t.Logf("the poison task's history, entry %d: %+v", i, e)
			}
		}
	}()
	if p.Crashes != maxCrashes || !strings.Contains(last.Error, fmt.Sprintf("running during %d worker deaths", maxCrashes)) {
		t.Errorf("poison task: crashes %d, last error %q", p.Crashes, last.Error)
	}
	host, _ := os.Hostname()
	for _, d := range deaths {
		if want := fmt.Sprintf("worker %s on host %s, pid %d", d.id, host, d.pid); !strings.Contains(last.Error, want) {
			t.Errorf("the poison task's error does not name %q: %q", want, last.Error)
		}
	}
	// One rescue per death in its history, the last one sure (a death
	// rescued within the settle time is not sure yet, and counts until its
	// process is heard from again, which a dead one never is).
	rescues := 0
	for _, e := range p.Errors {
		if e.Outcome == "rescued" {
			rescues++
		}
	}
	if rescues != len(deaths) || !last.Crash {
		t.Errorf("the poison task's history has %d rescues, want %d, the last sure: %+v", rescues, len(deaths), p.Errors)
	}
	charged, suspects := 0, 0
	for _, id := range innocent {
		task := b.get(t, id)
		if task.Status != queue.StatusCompleted || task.Attempt != 1 {
			charged++
			t.Errorf("innocent task %d: %s at attempt %d, want completed at attempt 1: %+v", id, task.Status, task.Attempt, task.Errors)
		}
		if task.Crashes > 0 {
			suspects++
		}
	}
	var running int
	if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE status <> 'completed' AND id <> $1", poison).Scan(&running); err != nil {
		t.Fatal(err)
	}
	// Requeue clears the count: the task is an ordinary task again.
	if _, err := b.client.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{IDs: []int64{poison}, Statuses: []queue.Status{queue.StatusFailed}}}); err != nil {
		t.Fatal(err)
	}
	if p := b.get(t, poison); p.Status != queue.StatusPending || p.Crashes != 0 {
		t.Errorf("requeued poison task: %s with crashes %d, want pending with 0", p.Status, p.Crashes)
	}
	t.Logf("%s mode: %d worker processes died before the poison task was failed (MaxCrashes %d); %d innocent tasks "+
		"were suspects (ran alone once), %d innocent tasks charged an attempt, %d left unfinished",
		mode, len(deaths), maxCrashes, suspects, charged, running)
}

// poisonChild runs a worker with the poison test's handlers until killed.
func poisonChild() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg := worker.Config{
		WorkerID:    os.Getenv("SKIPLOCK_CHILD_ID"),
		Concurrency: 4,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if os.Getenv("SKIPLOCK_POISON_MODE") == "lease" {
		cfg.Mode, cfg.LeaseDuration = worker.ModeLease, time.Second
	}
	w := worker.New(pool, testConfig(cfg))
	err = w.Run(ctx, worker.Handlers{
		"innocent": func(ctx context.Context, _ *worker.Task) error {
			select {
			case <-time.After(100 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		"poison": func(context.Context, *worker.Task) error {
			time.Sleep(20 * time.Millisecond) // its neighbours are running
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		},
	})
	fmt.Fprintln(os.Stderr, "Run returned:", err)
	os.Exit(1)
}

// TestSessionLossIsNotACrash: a worker whose lock session is ended while
// its process lives on (pg_terminate_backend, as a network cut or a
// server restart would) has its task rescued by another worker's rescuer
// without a death counted: the worker came back with a new session, so the
// rescue entry is no crash, the task is no suspect (a plain claim runs it
// again), and no attempt is charged.
func TestSessionLossIsNotACrash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	// A's handler finishes its work whatever happens to the session, so
	// that the rescue, not its outcome, returns the task. A never leads the
	// rescuer (its first try is an hour away): B's rescue must tell A's
	// lost session from a death.
	a, _ := start(t, pgtest.NewPool(t, b.schema), worker.Config{Concurrency: 1, RescueInterval: time.Hour}, worker.Handlers{
		"job": func(ctx context.Context, task *worker.Task) error {
			started <- struct{}{}
			<-release
			return nil
		},
	})
	id := b.enqueue(t, "job", nil)
	select {
	case <-started:
	case <-time.After(pgtest.Patient(10 * time.Second)):
		t.Fatal("A did not start the task")
	}
	var before int32
	if err := b.pool.QueryRow(context.Background(), "SELECT lock_backend_pid FROM skiplock_workers WHERE id = $1", a.ID()).Scan(&before); err != nil {
		t.Fatal(err)
	}
	b.terminateLockSession(t, a)
	// A dials again; only then does a rescuer look (a rescue before that
	// could not know yet: see TestRescueCountsDeaths).
	waitFor(t, 10*time.Second, "A registered with a new lock session", func() bool {
		var pid int32
		b.pool.QueryRow(context.Background(), "SELECT lock_backend_pid FROM skiplock_workers WHERE id = $1", a.ID()).Scan(&pid)
		return pid != 0 && pid != before
	})
	bw, _ := start(t, pgtest.NewPool(t, b.schema), worker.Config{}, worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }})
	waitFor(t, 10*time.Second, "the task rescued and completed by B", func() bool {
		task := b.get(t, id)
		return task.Status == queue.StatusCompleted && task.WorkerID == bw.ID()
	})
	unblock()
	task := b.get(t, id)
	if len(task.Errors) != 1 {
		t.Fatalf("history = %+v, want one rescue", task.Errors)
	}
	e := task.Errors[0]
	if e.Outcome != "rescued" || e.Crash || e.WorkerID != a.ID() || !strings.Contains(e.Error, "came back") {
		t.Errorf("rescue entry = %+v, want a rescue of A's attempt, not a crash", e)
	}
	if task.Crashes != 0 || task.Attempt != 1 {
		t.Errorf("crashes = %d, attempt %d after a lost session of a live worker, want 0 and 1", task.Crashes, task.Attempt)
	}
}
