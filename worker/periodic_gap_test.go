package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/worker"
)

// The tests of this file stop and kill worker processes (this test binary,
// run again as a child) and check that every tick of a schedule is
// enqueued exactly once through the gap: the ticks' run times follow one
// another a second apart, with no gap and no repeat.

// stallFor is how long a test stops a worker process: a stall or a
// handover shorter than the on-time window, with room to spare for a busy
// machine. The children use a window of childTickWindow, so that a
// takeover slowed down by a loaded machine still lands within it; the
// default window is TestSchedulerTickWindow's.
const (
	stallFor        = 3 * time.Second
	childTickWindow = 30 * time.Second
)

// workerChild is a worker process started by a test.
type workerChild struct {
	id     string
	cmd    *exec.Cmd
	stderr *syncBuffer
}

// startChildren runs n children of test (its name, run again in this test
// binary with env set) on the test's schema, and waits until each has
// registered. They are killed when the test ends, their logs printed if it
// failed.
func startChildren(t *testing.T, b *bundle, test, env string, n int) []*workerChild {
	t.Helper()
	cfg := b.pool.Config().ConnConfig
	url := fmt.Sprintf("postgres://%s@%s/%s?search_path=%s", cfg.User, net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), cfg.Database, b.schema)
	var children []*workerChild
	for i := range n {
		c := &workerChild{id: fmt.Sprintf("child-%d", i), stderr: &syncBuffer{}}
		c.cmd = exec.Command(os.Args[0], "-test.run=^"+test+"$")
		c.cmd.Env = append(os.Environ(), env+"=1", "DATABASE_URL="+url, "SKIPLOCK_CHILD_ID="+c.id)
		c.cmd.Stderr = c.stderr
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, c)
		t.Cleanup(func() {
			c.cmd.Process.Signal(syscall.SIGCONT)
			c.cmd.Process.Kill()
			c.cmd.Wait()
			if t.Failed() {
				t.Logf("%s:\n%s", c.id, c.stderr.String())
			}
		})
	}
	waitFor(t, 5*time.Second, fmt.Sprintf("%d worker processes registered", n), func() bool {
		var got int
		b.pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock_workers WHERE id LIKE 'child-%'").Scan(&got)
		return got == n
	})
	return children
}

// runChild runs a worker process for a test until it is killed. cfg gets
// the child's ID, a 100 ms poll, the children's tick window and a logger
// of warnings on stderr, which the test reads.
func runChild(cfg worker.Config, handlers worker.Handlers) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg.WorkerID, cfg.PollInterval = os.Getenv("SKIPLOCK_CHILD_ID"), 100*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	worker.SetTickWindow(&cfg, childTickWindow)
	err = worker.New(pool, cfg).Run(ctx, handlers)
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// leader is the child that holds an election now: the stored schedules'
// scheduler (bundle.schedulerPID) or a declared set's (declaredPID).
func (b *bundle) leader(t *testing.T, children []*workerChild, election func(*testing.T) int32) *workerChild {
	t.Helper()
	var id string
	waitFor(t, 2*time.Second, "an elected scheduler among the children", func() bool {
		pid := election(t)
		return pid != 0 && b.pool.QueryRow(context.Background(), "SELECT id FROM skiplock_workers WHERE lock_backend_pid = $1", pid).Scan(&id) == nil
	})
	for _, c := range children {
		if c.id == id {
			return c
		}
	}
	t.Fatalf("the scheduler is %s, not a child", id)
	return nil
}

// eachTickOnce checks that the ticks of name run a second apart from the
// first to the last, none missing and none twice, and that they span
// [from, to]: the stall or handover happened among them.
func (b *bundle) eachTickOnce(t *testing.T, name string, from, to time.Time) []time.Time {
	t.Helper()
	ticks := b.ticksOf(t, name)
	if len(ticks) == 0 || !ticks[0].Before(from) || ticks[len(ticks)-1].Before(to) {
		t.Fatalf("ticks of %s %v do not span the gap from %s to %s", name, ticks, from.UTC(), to.UTC())
	}
	for i, at := range ticks {
		if at.UnixNano()%int64(time.Second) != 0 {
			t.Errorf("tick %s is not on a whole second", at.UTC())
		}
		if i > 0 && at.Sub(ticks[i-1]) != time.Second {
			t.Errorf("ticks %s and %s: a tick was lost or enqueued twice (gap from %s to %s)",
				ticks[i-1].UTC(), at.UTC(), from.UTC(), to.UTC())
		}
	}
	return ticks
}

// lateTicks counts the tasks of name enqueued at least a second after
// their tick: the ticks a stall or a handover made late.
func (b *bundle) lateTicks(t *testing.T, name string) int {
	t.Helper()
	return b.count(t, "name = $1 AND created_at >= run_at + interval '1 second'", name)
}

// stall stops a child for stallFor and lets it go on; it returns when the
// stop began and when it ended.
func stall(t *testing.T, c *workerChild) (stopped, resumed time.Time) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped = time.Now()
	time.Sleep(stallFor) // the stall under test, not a wait for a condition
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	return stopped, time.Now()
}

// noMissedLog fails the test if a child logged missed ticks: every tick
// in the gap was on time.
func noMissedLog(t *testing.T, children []*workerChild) {
	t.Helper()
	for _, c := range children {
		if strings.Contains(c.stderr.String(), "missed ticks") {
			t.Errorf("%s logged missed ticks although the gap was shorter than the window:\n%s", c.id, c.stderr.String())
		}
	}
}

const periodicChildEnv = "SKIPLOCK_PERIODIC_CHILD"

// periodicChild is a worker with one schedule of Config.Periodic, a tick
// every second.
func periodicChild() {
	runChild(worker.Config{Periodic: []worker.PeriodicTask{{Name: "repro", Every: time.Second, Task: "tick"}}},
		worker.Handlers{"tick": func(context.Context, *worker.Task) error { return nil }})
}

// TestPeriodicStallEnqueuesEveryTick: the one worker process, which
// schedules a task every second, is stopped for 3 s and goes on. The ticks
// that came due while it was stopped are enqueued when it resumes, each
// once: none is dropped as missed, since none is later than the window.
func TestPeriodicStallEnqueuesEveryTick(t *testing.T) {
	if os.Getenv(periodicChildEnv) != "" {
		periodicChild()
		return
	}
	t.Parallel()
	b := setup(t)
	children := startChildren(t, b, "TestPeriodicStallEnqueuesEveryTick", periodicChildEnv, 1)
	waitFor(t, 4*time.Second, "three ticks", func() bool { return len(b.ticksOf(t, "tick")) >= 3 })
	stopped, resumed := stall(t, children[0])
	waitFor(t, 4*time.Second, "two ticks after the stall", func() bool {
		ticks := b.ticksOf(t, "tick")
		return len(ticks) > 0 && !ticks[len(ticks)-1].Before(resumed.Add(2*time.Second))
	})
	ticks := b.eachTickOnce(t, "tick", stopped, resumed)
	noMissedLog(t, children)
	t.Logf("%d ticks; %d enqueued late, after the stop of %s", len(ticks), b.lateTicks(t, "tick"), stallFor)
}

// TestPeriodicHandoverEnqueuesTheGap: of two worker processes, the one
// that schedules is stopped for 3 s, then killed. The other takes over and
// enqueues the ticks of the gap, each once.
func TestPeriodicHandoverEnqueuesTheGap(t *testing.T) {
	if os.Getenv(periodicChildEnv) != "" {
		periodicChild()
		return
	}
	t.Parallel()
	b := setup(t)
	children := startChildren(t, b, "TestPeriodicHandoverEnqueuesTheGap", periodicChildEnv, 2)
	waitFor(t, 4*time.Second, "three ticks", func() bool { return len(b.ticksOf(t, "tick")) >= 3 })
	l := b.leader(t, children, b.declaredPID)
	stopped, killed := stallThenKill(t, l)
	waitFor(t, 5*time.Second, "two ticks after the scheduler was killed", func() bool {
		ticks := b.ticksOf(t, "tick")
		return len(ticks) > 0 && !ticks[len(ticks)-1].Before(killed.Add(2*time.Second))
	})
	ticks := b.eachTickOnce(t, "tick", stopped, killed)
	noMissedLog(t, children)
	t.Logf("%d ticks; %s stopped for %s and killed; %d enqueued late", len(ticks), l.id, stallFor, b.lateTicks(t, "tick"))
}

// stallThenKill stops a child for stallFor and kills it, stopped: its
// scheduler enqueues nothing from the stop on, and its sessions end at the
// kill.
func stallThenKill(t *testing.T, c *workerChild) (stopped, killed time.Time) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped = time.Now()
	time.Sleep(stallFor) // the stall under test, not a wait for a condition
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	return stopped, time.Now()
}
