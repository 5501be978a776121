package worker_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TestPeriodicEachTickOnce: three workers with clocks 300 ms apart, started
// at different times, declare the same schedule; the scheduler's session is
// terminated mid-run. Every tick is enqueued, and run, exactly once.
func TestPeriodicEachTickOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	runs := map[string]int{} // queue (one per schedule) and tick
	handlers := worker.Handlers{"tick": func(ctx context.Context, task *worker.Task) error {
		mu.Lock()
		runs[task.Queue+" "+task.RunAt.UTC().String()]++
		mu.Unlock()
		return nil
	}}
	var ws []*worker.Worker
	for i, skew := range []time.Duration{0, 300 * time.Millisecond, -300 * time.Millisecond} {
		cfg := worker.Config{
			PollInterval: 100 * time.Millisecond,
			Periodic: []worker.PeriodicTask{
				{Every: time.Second, Task: "tick"},
				{Cron: "*/1 * * * * *", Task: "tick", Name: "cron-every-second", Options: []queue.Option{queue.WithQueue("cron")}},
			},
			Queues: []string{"default", "cron"},
		}
		worker.SetClock(&cfg, func() time.Time { return time.Now().Add(skew) })
		w, _ := start(t, pgtest.NewPool(t, b.schema), cfg, handlers)
		ws = append(ws, w)
		if i == 0 {
			// The first worker is the scheduler before the others start.
			waitFor(t, time.Second, "an elected scheduler", func() bool { return b.schedulerPID(t) != 0 })
		}
	}
	// Ticks are flowing before the handover, and none is running: ending
	// the session that holds task locks would (rightly) run it again.
	waitFor(t, 2*time.Second, "a tick of each schedule run", func() bool {
		return b.count(t, "queue = 'default'") >= 1 && b.count(t, "queue = 'cron'") >= 1 &&
			b.count(t, "status <> 'completed'") == 0
	})
	// Take the scheduler's session away: another worker (or the same,
	// reconnected) must go on without losing or repeating a tick.
	pid := b.schedulerPID(t)
	if pid == 0 {
		t.Fatal("no elected scheduler")
	}
	before := b.count(t, "queue = 'default'") + b.count(t, "queue = 'cron'")
	b.pool.Exec(context.Background(), "SELECT pg_terminate_backend($1)", pid)
	// Ticks go on after it: wait for two more of each schedule (a busy
	// machine is slow to reconnect and elect, which is no failure).
	waitFor(t, 2500*time.Millisecond, "ticks after the scheduler's session ended", func() bool {
		return b.count(t, "queue = 'default'")+b.count(t, "queue = 'cron'") >= before+4 &&
			b.count(t, "queue = 'default'") >= 3 && b.count(t, "queue = 'cron'") >= 3
	})

	for _, q := range []string{"default", "cron"} {
		rows, err := b.pool.Query(context.Background(), `SELECT run_at FROM skiplock_tasks WHERE queue = $1 ORDER BY run_at`, q)
		if err != nil {
			t.Fatal(err)
		}
		var ticks []time.Time
		for rows.Next() {
			var at time.Time
			rows.Scan(&at)
			ticks = append(ticks, at.UTC())
		}
		rows.Close()
		if len(ticks) < 3 {
			t.Fatalf("%s: only %d ticks enqueued", q, len(ticks))
		}
		for i, at := range ticks {
			if at.Nanosecond() != 0 {
				t.Fatalf("%s: tick %s is not on a whole second", q, at)
			}
			if i > 0 && at.Sub(ticks[i-1]) != time.Second {
				t.Fatalf("%s: ticks %s and %s: a tick was lost or repeated", q, ticks[i-1], at)
			}
		}
		t.Logf("%s: %d ticks, each enqueued once, none lost across a scheduler handover", q, len(ticks))
	}
	waitFor(t, 5*time.Second, "ticks run", func() bool { return b.count(t, "status <> 'completed'") == 0 })
	mu.Lock()
	defer mu.Unlock()
	for tick, n := range runs {
		if n != 1 {
			t.Fatalf("tick %s ran %d times, want once", tick, n)
		}
	}
}

func TestPeriodicMissedTicks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Ten-minute ticks; the last enqueued an hour before a clock stopped at
	// 12:05, so the 11:10 to 12:00 ticks were missed.
	now := time.Date(2026, 11, 21, 12, 5, 0, 0, time.UTC)
	for _, id := range []string{"skip", "catchup"} {
		_, err := b.pool.Exec(context.Background(), "INSERT INTO skiplock_periodic (schedule, last_tick) VALUES ($1, $2)", id, now.Add(-65*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg := worker.Config{Queues: []string{"none"}, Periodic: []worker.PeriodicTask{
		{Name: "skip", Every: 10 * time.Minute, Task: "report"},
		{Name: "catchup", Every: 10 * time.Minute, Task: "report", Payload: "catchup", CatchUp: true},
	}}
	var clockReads atomic.Int64 // one per schedule per scheduler pass
	worker.SetClock(&cfg, func() time.Time { clockReads.Add(1); return now })
	start(t, b.pool, cfg, worker.Handlers{"report": func(context.Context, *worker.Task) error { return nil }})
	waitFor(t, 5*time.Second, "catch-up tick", func() bool { return b.count(t, "true") == 1 })
	// More scheduler passes change nothing. A pass reads the clock before
	// each schedule, one after another, so three more reads mean two more
	// schedule runs have finished: a whole pass over both schedules.
	passed := clockReads.Load() + 3
	waitFor(t, 2*time.Second, "another scheduler pass", func() bool { return clockReads.Load() >= passed })
	var payload string
	var runAt time.Time
	if err := b.pool.QueryRow(context.Background(), "SELECT payload::text, run_at FROM skiplock_tasks").Scan(&payload, &runAt); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, "true"); n != 1 || payload != `"catchup"` || !runAt.Equal(now.Add(-5*time.Minute)) {
		t.Fatalf("%d tasks; payload %s at %s; want one catch-up of the 12:00 tick", n, payload, runAt)
	}
}

func TestPeriodicInvalid(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	noop := worker.Handlers{"x": func(context.Context, *worker.Task) error { return nil }}
	for _, tc := range []struct {
		p    worker.PeriodicTask
		want string
	}{
		{worker.PeriodicTask{Task: "x", Cron: "61 * * * *"}, "cron \"61 * * * *\""},
		{worker.PeriodicTask{Task: "x", Cron: "@every 5m"}, "use Every"},
		{worker.PeriodicTask{Task: "x"}, "set exactly one of Cron and Every"},
		{worker.PeriodicTask{Task: "x", Every: time.Millisecond}, "at least 1s"},
		{worker.PeriodicTask{Task: "x", Every: time.Minute, Payload: make(chan int)}, "cannot be encoded"},
	} {
		err := worker.New(pool, worker.Config{Periodic: []worker.PeriodicTask{tc.p}}).Run(context.Background(), noop)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.p, err, tc.want)
		}
	}
}

// schedulerPID is the backend holding the periodic scheduler's election
// lock, or 0 while no worker holds it.
func (b *bundle) schedulerPID(t *testing.T) int32 {
	t.Helper()
	var pid int32
	err := b.pool.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory'
		AND objsubid = 1 AND objid = 2 AND classid = 'skiplock_tasks'::regclass::oid AND granted`).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
