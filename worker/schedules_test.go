package worker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// storedConfig is a worker with no schedule of its own, that reloads the
// stored schedules every 200 ms if a notification is missed.
func storedConfig(cfg worker.Config) worker.Config {
	worker.SetScheduleReload(&cfg, 200*time.Millisecond)
	return cfg
}

// ticksOf returns the run times of the tasks of name, in order.
func (b *bundle) ticksOf(t *testing.T, name string) []time.Time {
	t.Helper()
	var at []time.Time
	err := b.pool.QueryRow(context.Background(),
		"SELECT coalesce(array_agg(run_at ORDER BY run_at), '{}') FROM skiplock_tasks WHERE name = $1", name).Scan(&at)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// dups counts the run times that more than one task of names has: a tick
// enqueued twice.
func (b *bundle) dups(t *testing.T, names ...string) int {
	t.Helper()
	var n int
	err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM (
		SELECT run_at FROM skiplock_tasks WHERE name = ANY($1) GROUP BY run_at HAVING count(*) > 1) AS d`, names).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStoredSchedules: a running worker with no schedule picks up a
// schedule added through the API and enqueues its ticks; a change of
// interval, a pause, a resume and a removal are each picked up.
func TestStoredSchedules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	noop := func(context.Context, *worker.Task) error { return nil }
	start(t, b.pool, storedConfig(worker.Config{}), worker.Handlers{"tick": noop, "marker": noop})
	waitFor(t, time.Second, "an elected scheduler", func() bool { return b.schedulerPID(t) != 0 })

	// Added: enqueued within seconds, every second, on the second.
	added := time.Now()
	if err := b.client.AddSchedule(ctx, queue.Schedule{Name: "ticker", Every: time.Second, Task: "tick", Queue: "default", Payload: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the first tick of the added schedule", func() bool { return len(b.ticksOf(t, "tick")) >= 1 })
	t.Logf("AddSchedule to first enqueue: %s", time.Since(added).Round(time.Millisecond))
	for _, at := range b.ticksOf(t, "tick") {
		if at.UnixNano()%int64(time.Second) != 0 {
			t.Errorf("tick at %s is not on the second", at)
		}
	}

	// Changed to every 2s, and to another task name: the new task's ticks
	// fall on even seconds, 2s apart, and the old one ticks no more.
	s, err := b.client.GetSchedule(ctx, "ticker")
	if err != nil {
		t.Fatal(err)
	}
	s.Every, s.Task = 2*time.Second, "tick2"
	if err := b.client.UpdateSchedule(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "two ticks of the new interval", func() bool { return len(b.ticksOf(t, "tick2")) >= 2 })
	ticks3 := b.ticksOf(t, "tick2")
	for i, at := range ticks3 {
		if at.UnixNano()%int64(2*time.Second) != 0 || i > 0 && at.Sub(ticks3[i-1]) != 2*time.Second {
			t.Errorf("ticks after the change to every 2s: %v", ticks3)
			break
		}
	}
	for _, at := range b.ticksOf(t, "tick") {
		if !at.Before(ticks3[0]) {
			t.Errorf("the old task ticked at %s, after the change (first new tick %s)", at, ticks3[0])
		}
	}
	if got, err := b.client.GetSchedule(ctx, "ticker"); err != nil || got.Every != 2*time.Second || got.Task != "tick2" || string(got.Payload) != `{"n": 1}` {
		t.Errorf("GetSchedule = %+v, %v", got, err)
	}

	// Paused: its ticks pass (the last tick moves on), none is enqueued.
	if err := b.client.PauseSchedule(ctx, "ticker"); err != nil {
		t.Fatal(err)
	}
	s, _ = b.client.GetSchedule(ctx, "ticker")
	if !s.Paused || s.PausedAt == nil {
		t.Fatalf("after PauseSchedule: %+v", s)
	}
	pausedAt := *s.PausedAt
	waitFor(t, 5*time.Second, "two ticks passed while paused", func() bool {
		got, err := b.client.GetSchedule(ctx, "ticker")
		return err == nil && got.LastTick != nil && got.LastTick.After(pausedAt.Add(2*time.Second))
	})
	for _, at := range b.ticksOf(t, "tick2") {
		if at.After(pausedAt.Add(time.Second)) {
			t.Errorf("tick at %s enqueued while paused (since %s)", at, pausedAt)
		}
	}
	// Resumed: ticks again.
	n := len(b.ticksOf(t, "tick2"))
	if err := b.client.ResumeSchedule(ctx, "ticker"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "a tick after resuming", func() bool { return len(b.ticksOf(t, "tick2")) > n })

	// Removed: once a schedule added after the removal ticks (the
	// scheduler loaded both changes), and ticks twice more, no tick of the
	// removed one came after it.
	if err := b.client.RemoveSchedule(ctx, "ticker"); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	if err := b.client.AddSchedule(ctx, queue.Schedule{Name: "marker", Every: time.Second, Task: "marker"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 4*time.Second, "three ticks of the marker", func() bool { return len(b.ticksOf(t, "marker")) >= 3 })
	for _, at := range b.ticksOf(t, "tick2") {
		if at.After(removed.Add(time.Second)) {
			t.Errorf("tick at %s enqueued after the removal at %s", at, removed)
		}
	}
	if got, err := b.client.Schedules(ctx); err != nil || len(got) != 1 || got[0].Name != "marker" {
		t.Errorf("Schedules = %+v, %v; want the marker only", got, err)
	}
	// Every tick once.
	if dup := b.dups(t, "tick", "tick2", "marker"); dup != 0 {
		t.Errorf("%d ticks enqueued twice", dup)
	}
}

// TestStoredScheduleFirstTick: schedules added to a running worker with
// the default PollInterval (1 s), at eight moments spread over the
// second, each start with a tick after the addition (never the past), on
// the second, and are enqueued. It logs how long each took from
// AddSchedule to its first enqueue: the wait for the next whole second,
// then for the scheduler's next pass (at most PollInterval, or 1 s).
func TestStoredScheduleFirstTick(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	start(t, b.pool, storedConfig(worker.Config{PollInterval: time.Second}), // the default
		worker.Handlers{"tick": func(context.Context, *worker.Task) error { return nil }})
	waitFor(t, 2*time.Second, "an elected scheduler", func() bool { return b.schedulerPID(t) != 0 })
	var took []time.Duration
	for i := range 8 {
		// Add it at i/8 of a second past a whole second.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + time.Duration(i)*time.Second/8)))
		name := fmt.Sprintf("first-%d", i)
		added := time.Now()
		if err := b.client.AddSchedule(ctx, queue.Schedule{Name: name, Every: time.Second, Task: name, Queue: "unclaimed"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Second, "the first tick of "+name, func() bool { return len(b.ticksOf(t, name)) >= 1 })
		took = append(took, time.Since(added))
		if first := b.ticksOf(t, name)[0]; !first.After(added) || first.UnixNano()%int64(time.Second) != 0 {
			t.Errorf("%s added at %s: first tick %s, want a whole second after the addition", name, added.UTC(), first.UTC())
		}
		if err := b.client.RemoveSchedule(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(took)
	t.Logf("AddSchedule to first enqueue, PollInterval %s, 8 additions spread over the second: %s to %s, median %s",
		time.Second, took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond),
		((took[3] + took[4]) / 2).Round(time.Millisecond))
}

// TestStoredScheduleReplacesConfigured: a stored schedule named as a
// Config.Periodic entry's ID replaces it while it is stored, and the
// configured one comes back when it is removed.
func TestStoredScheduleReplacesConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	noop := func(context.Context, *worker.Task) error { return nil }
	cfg := storedConfig(worker.Config{Periodic: []worker.PeriodicTask{{Name: "report", Every: time.Second, Task: "from-config"}}})
	start(t, b.pool, cfg, worker.Handlers{"from-config": noop, "from-db": noop})
	waitFor(t, 2*time.Second, "a tick of the configured schedule", func() bool { return len(b.ticksOf(t, "from-config")) >= 1 })
	if err := b.client.AddSchedule(ctx, queue.Schedule{Name: "report", Every: time.Second, Task: "from-db"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "a tick of the stored schedule", func() bool { return len(b.ticksOf(t, "from-db")) >= 2 })
	firstDB := b.ticksOf(t, "from-db")[0]
	for _, at := range b.ticksOf(t, "from-config") {
		if !at.Before(firstDB) {
			t.Errorf("configured schedule ticked at %s, after the stored one replaced it (%s)", at, firstDB)
		}
	}
	if err := b.client.RemoveSchedule(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	n := len(b.ticksOf(t, "from-config"))
	waitFor(t, 3*time.Second, "the configured schedule back", func() bool { return len(b.ticksOf(t, "from-config")) > n })
	// They share the schedule's ticks: no tick enqueued by both.
	if dup := b.dups(t, "from-config", "from-db"); dup != 0 {
		t.Errorf("%d ticks enqueued by both", dup)
	}
}

// TestStoredScheduleEachTickOnceAcrossProcesses: three worker processes
// (this test binary, run again) share a stored schedule added while they
// run; the one that schedules is stopped for 3 s, then killed. Another
// takes over and enqueues the ticks of the gap: every tick is enqueued
// exactly once, none lost, and ticks go on after the kill.
func TestStoredScheduleEachTickOnceAcrossProcesses(t *testing.T) {
	if os.Getenv("SKIPLOCK_SCHEDULE_CHILD") != "" {
		scheduleChild()
		return
	}
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	children := startChildren(t, b, "TestStoredScheduleEachTickOnceAcrossProcesses", "SKIPLOCK_SCHEDULE_CHILD", 3)
	if err := b.client.AddSchedule(ctx, queue.Schedule{Name: "cluster", Every: time.Second, Task: "tick"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 4*time.Second, "three ticks", func() bool { return len(b.ticksOf(t, "tick")) >= 3 })
	l := b.leader(t, children, b.schedulerPID)
	stopped, killed := stallThenKill(t, l)
	waitFor(t, 5*time.Second, "two ticks after the scheduler's process was killed", func() bool {
		ticks := b.ticksOf(t, "tick")
		return len(ticks) > 0 && !ticks[len(ticks)-1].Before(killed.Add(2*time.Second))
	})
	ticks := b.eachTickOnce(t, "tick", stopped, killed)
	noMissedLog(t, children)
	t.Logf("%d ticks by %d processes; %s stopped for %s and killed; %d enqueued late",
		len(ticks), len(children), l.id, stallFor, b.lateTicks(t, "tick"))
}

// scheduleChild runs a worker with no schedule of its own until killed.
func scheduleChild() {
	runChild(storedConfig(worker.Config{}), worker.Handlers{"tick": func(context.Context, *worker.Task) error { return nil }})
}

// TestAddRemoveQueue: a queue added to a running worker is claimed from; a
// removed one is not, its running task finishes and its pending ones stay
// pending until it is added again.
func TestAddRemoveQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	started, release := make(chan int64, 4), make(chan struct{})
	counted := &queueClaims{seen: map[string]int64{}}
	w, stop := start(t, b.pool, worker.Config{Queues: []string{"a"}, Observer: counted}, worker.Handlers{
		"work": func(_ context.Context, task *worker.Task) error { return nil },
		"slow": func(_ context.Context, task *worker.Task) error {
			started <- task.ID
			<-release
			return nil
		},
	})
	first := b.enqueue(t, "work", nil, queue.WithQueue("b"))
	waitFor(t, 300*time.Millisecond, "claims of queue a", func() bool { return counted.of("a") >= 3 })
	if s := b.get(t, first).Status; s != queue.StatusPending {
		t.Fatalf("task of queue b is %s before AddQueue", s)
	}
	added := time.Now()
	if err := w.AddQueue("b", 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "the task of the added queue completed", func() bool { return b.get(t, first).Status == queue.StatusCompleted })
	t.Logf("AddQueue to its pending task completed: %s", time.Since(added).Round(time.Millisecond))
	if got := w.Queues(); strings.Join(got, ",") != "a,b" {
		t.Errorf("Queues() = %v", got)
	}
	var recorded []string
	b.pool.QueryRow(ctx, "SELECT queues FROM skiplock_workers WHERE id = $1", w.ID()).Scan(&recorded)
	if strings.Join(recorded, ",") != "a,b" {
		t.Errorf("skiplock_workers.queues = %v, want [a b]", recorded)
	}

	// Bad input, named.
	if err := w.AddQueue("b", 0); err == nil || !strings.Contains(err.Error(), "already claims") {
		t.Errorf("AddQueue of a queue claimed already: %v", err)
	}
	if err := w.AddQueue("", 0); err == nil || !strings.Contains(err.Error(), "queue name") {
		t.Errorf("AddQueue(\"\"): %v", err)
	}
	if err := w.RemoveQueue(ctx, "nope"); !errors.Is(err, worker.ErrUnknownQueue) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("RemoveQueue of an unknown queue: %v", err)
	}

	// Removed while a task of it runs: the task finishes, the next stays
	// pending while queue a's claim loop goes round.
	running := b.enqueue(t, "slow", nil, queue.WithQueue("b"))
	if id := <-started; id != running {
		t.Fatalf("started %d, want %d", id, running)
	}
	removing := time.Now()
	if err := w.RemoveQueue(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	t.Logf("RemoveQueue returned in %s", time.Since(removing).Round(time.Microsecond))
	claimsOfB := counted.of("b")
	left := b.enqueue(t, "work", nil, queue.WithQueue("b"))
	close(release)
	waitFor(t, time.Second, "the running task of the removed queue completed", func() bool { return b.get(t, running).Status == queue.StatusCompleted })
	from := counted.of("a")
	waitFor(t, time.Second, "five more claims of queue a", func() bool { return counted.of("a") >= from+5 })
	if s := b.get(t, left).Status; s != queue.StatusPending {
		t.Fatalf("task of the removed queue is %s, want pending", s)
	}
	if n := counted.of("b") - claimsOfB; n != 0 {
		t.Errorf("%d claims of queue b after RemoveQueue returned", n)
	}
	// Added again: nothing was lost.
	if err := w.AddQueue("b", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "the pending task of the queue added again", func() bool { return b.get(t, left).Status == queue.StatusCompleted })

	stop()
	if err := w.AddQueue("c", 0); !errors.Is(err, worker.ErrStopped) {
		t.Errorf("AddQueue after Run returned: %v, want ErrStopped", err)
	}
}

// TestAddQueueBeforeRun: queues added before Run are claimed from when it
// starts.
func TestAddQueueBeforeRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := worker.New(b.pool, testConfig(worker.Config{Queues: []string{"a"}}))
	if err := w.AddQueue("late", 0); err != nil {
		t.Fatal(err)
	}
	if err := w.RemoveQueue(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	id := b.enqueue(t, "work", nil, queue.WithQueue("late"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, worker.Handlers{"work": func(context.Context, *worker.Task) error { return nil }})
	}()
	waitFor(t, time.Second, "the task of the queue added before Run", func() bool { return b.get(t, id).Status == queue.StatusCompleted })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// queueClaims counts claim queries per queue.
type queueClaims struct {
	worker.NopObserver
	mu   sync.Mutex
	seen map[string]int64
}

func (c *queueClaims) Claimed(q string, _, _ int) {
	c.mu.Lock()
	c.seen[q]++
	c.mu.Unlock()
}

func (c *queueClaims) of(q string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[q]
}

// TestStoredScheduleWithoutNotify: a worker that hears no notification (in
// lease mode without ListenURL) picks up a stored schedule on its reload
// poll.
func TestStoredScheduleWithoutNotify(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noop := func(context.Context, *worker.Task) error { return nil }
	start(t, b.pool, storedConfig(worker.Config{Mode: worker.ModeLease}), worker.Handlers{"tick": noop})
	if err := b.client.AddSchedule(context.Background(), queue.Schedule{Name: "polled", Every: time.Second, Task: "tick"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "a tick of the schedule, found by the poll", func() bool { return len(b.ticksOf(t, "tick")) >= 1 })
}
