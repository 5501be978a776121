package worker_test

import (
	"context"
	"slices"
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
			waitFor(t, time.Second, "an elected scheduler", func() bool { return b.declaredPID(t) != 0 })
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
	pid := b.declaredPID(t)
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

// schedulerPID is the backend holding the stored schedules' scheduler's
// election lock, or 0 while no worker holds it.
func (b *bundle) schedulerPID(t *testing.T) int32 {
	t.Helper()
	return b.electionPID(t, "objid = 2")
}

// declaredPID is the backend holding the election lock of a declared set
// of schedules (the test's workers declare one set), or 0 while no worker
// holds it.
func (b *bundle) declaredPID(t *testing.T) int32 {
	t.Helper()
	return b.electionPID(t, "objid >= 1073741824 AND objid < 2147483648")
}

// electionPID is the backend holding an election lock whose job matches
// the condition on objid, or 0 if none.
func (b *bundle) electionPID(t *testing.T, job string) int32 {
	t.Helper()
	var pid int32
	err := b.pool.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory'
		AND objsubid = 1 AND `+job+` AND classid = 'skiplock_tasks'::regclass::oid AND granted`).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestPeriodicMixedFleet: workers that declare different schedules (two
// binaries, or a rolling deploy) each see theirs ticked, in either mode. B
// declares "b-only" and starts first, so it leads the stored schedules'
// election; A declares "a-only" and "a-replaced", which a paused stored
// schedule replaces. While both run, every schedule is ticked, each tick
// once: A's, B's and a stored one; the paused one replaces A's, which
// enqueues nothing.
func TestPeriodicMixedFleet(t *testing.T) {
	t.Parallel()
	for _, mode := range []worker.Mode{worker.ModeAdvisory, worker.ModeLease} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			testPeriodicMixedFleet(t, mode)
		})
	}
}

func testPeriodicMixedFleet(t *testing.T, mode worker.Mode) {
	b := setup(t)
	ctx := context.Background()
	noop := func(context.Context, *worker.Task) error { return nil }
	handlers := worker.Handlers{"a-only": noop, "b-only": noop, "stored": noop, "a-replaced": noop, "from-db": noop}
	if err := b.client.AddSchedule(ctx, queue.Schedule{Name: "stored", Every: time.Second, Task: "stored"}); err != nil {
		t.Fatal(err)
	}
	if err := b.client.AddSchedule(ctx, queue.Schedule{Name: "a-replaced", Every: time.Second, Task: "from-db"}); err != nil {
		t.Fatal(err)
	}
	if err := b.client.PauseSchedule(ctx, "a-replaced"); err != nil {
		t.Fatal(err)
	}
	// leaders are the IDs of the workers that hold the stored schedules'
	// election (declared false) or a declared set's, sorted.
	leaders := func(declared bool) []string {
		t.Helper()
		q := `SELECT coalesce(array_agg(w.id ORDER BY w.id), '{}') FROM skiplock_workers AS w JOIN pg_locks AS l ON l.pid = w.lock_backend_pid
			WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.classid = 'skiplock_tasks'::regclass::oid AND l.granted
			  AND CASE WHEN $1 THEN l.objid >= 1073741824 AND l.objid < 2147483648 ELSE l.objid = 2 END`
		if mode == worker.ModeLease {
			q = `SELECT coalesce(array_agg(holder ORDER BY holder), '{}') FROM skiplock_leaders
				WHERE expires_at > now() AND CASE WHEN $1 THEN job LIKE 'scheduler:%' ELSE job = 'scheduler' END`
		}
		var ids []string
		if err := b.pool.QueryRow(ctx, q, declared).Scan(&ids); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	start(t, pgtest.NewPool(t, b.schema), worker.Config{Mode: mode, WorkerID: "B",
		Periodic: []worker.PeriodicTask{{Name: "b-only", Every: time.Second, Task: "b-only"}}}, handlers)
	waitFor(t, 2*time.Second, "B leading the stored schedules", func() bool { return slices.Equal(leaders(false), []string{"B"}) })
	start(t, pgtest.NewPool(t, b.schema), worker.Config{Mode: mode, WorkerID: "A", Periodic: []worker.PeriodicTask{
		{Name: "a-only", Every: time.Second, Task: "a-only"},
		{Name: "a-replaced", Every: time.Second, Task: "a-replaced"},
	}}, handlers)
	waitFor(t, 5*time.Second, "three ticks of each schedule", func() bool {
		return len(b.ticksOf(t, "a-only")) >= 3 && len(b.ticksOf(t, "b-only")) >= 3 && len(b.ticksOf(t, "stored")) >= 3
	})
	if got := leaders(false); !slices.Equal(got, []string{"B"}) {
		t.Errorf("the stored schedules' scheduler is %v, want B alone", got)
	}
	// Each declared set has its own election, held by its worker.
	if got := leaders(true); !slices.Equal(got, []string{"A", "B"}) {
		t.Errorf("declared sets' elections held by %v, want A's and B's", got)
	}
	for _, name := range []string{"a-only", "b-only", "stored"} {
		ticks := b.ticksOf(t, name)
		for i := 1; i < len(ticks); i++ {
			if ticks[i].Sub(ticks[i-1]) != time.Second {
				t.Errorf("%s: ticks %s and %s: a tick was lost or enqueued twice", name, ticks[i-1].UTC(), ticks[i].UTC())
			}
		}
	}
	// The paused stored schedule replaced A's: its ticks passed, and
	// neither task was enqueued.
	s, err := b.client.GetSchedule(ctx, "a-replaced")
	if err != nil {
		t.Fatal(err)
	}
	if s.LastTick == nil {
		t.Errorf("the paused schedule's ticks did not pass: no last tick")
	}
	if n := len(b.ticksOf(t, "a-replaced")) + len(b.ticksOf(t, "from-db")); n != 0 {
		t.Errorf("%d ticks of a schedule that a paused stored one replaces", n)
	}
}
