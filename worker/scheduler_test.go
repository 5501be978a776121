package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
)

// TestSchedulersEnqueueEachTickOnce: two schedulers that both believe they
// lead, on one clock that the test moves a minute at a time, enqueue every
// tick of each schedule exactly once.
func TestSchedulersEnqueueEachTickOnce(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	schedules, err := parseSchedules([]PeriodicTask{
		{Every: time.Minute, Task: "report"},
		{Cron: "*/5 * * * *", Task: "digest"},
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var passes [2]atomic.Int64
	for i := range passes {
		s := &scheduler{
			config: schedules, leadDeclared: func(context.Context) bool { return true },
			pool: b.pool, queries: b.queries, producer: b.client, now: now, every: 5 * time.Millisecond, log: b.log,
			passed: func() { passes[i].Add(1) },
		}
		go s.run(ctx)
	}
	// settle waits until each scheduler has made two more passes: the
	// second began after the clock last moved.
	settle := func() {
		t.Helper()
		for i := range passes {
			from := passes[i].Load()
			pgtest.Eventually(t, 500*time.Millisecond, fmt.Sprintf("two passes of scheduler %d", i), func() bool {
				return passes[i].Load() >= from+2
			})
		}
	}
	ticks := func(name string) []time.Time {
		t.Helper()
		var at []time.Time
		err := b.pool.QueryRow(ctx, "SELECT coalesce(array_agg(run_at ORDER BY run_at), '{}') FROM skiplock_tasks WHERE name = $1", name).Scan(&at)
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	settle() // a new schedule starts with its next tick
	if n := len(ticks("report")) + len(ticks("digest")); n != 0 {
		t.Fatalf("%d tasks enqueued before the first tick", n)
	}
	const minutes = 12
	for m := 1; m <= minutes; m++ {
		clock.Store(start.Add(time.Duration(m) * time.Minute).UnixNano())
		settle()
		if n := len(ticks("report")); n != m {
			t.Fatalf("at 12:%02d: %d report tasks enqueued, want %d", m, n, m)
		}
	}
	for name, every := range map[string]time.Duration{"report": time.Minute, "digest": 5 * time.Minute} {
		at := ticks(name)
		if want := int(minutes * time.Minute / every); len(at) != want {
			t.Errorf("%s: %d ticks enqueued, want %d: %v", name, len(at), want, at)
			continue
		}
		for i, tick := range at {
			if want := start.Add(time.Duration(i+1) * every); !tick.Equal(want) {
				t.Errorf("%s: tick %d runs at %s, want %s", name, i, tick.UTC(), want)
			}
		}
	}
}

// TestSchedulerTickWindow: after a stall of 15 s, the scheduler enqueues
// each tick at most 10 s late (the default window), once, and skips the
// older ones, logging their count once; with CatchUp it enqueues the
// latest of those too. Passes that race (a handover) enqueue nothing twice.
func TestSchedulerTickWindow(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	schedules, err := parseSchedules([]PeriodicTask{
		{Name: "every", Every: time.Second, Task: "every"},
		{Name: "every-catchup", Every: time.Second, Task: "every-catchup", CatchUp: true},
		{Name: "cron", Cron: "* * * * * *", Task: "cron"},
		{Name: "cron-catchup", Cron: "* * * * * *", Task: "cron-catchup", CatchUp: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, s := range schedules {
		if _, err := b.pool.Exec(ctx, "INSERT INTO skiplock_periodic (schedule, last_tick) VALUES ($1, $2)", s.Name, t0); err != nil {
			t.Fatal(err)
		}
	}
	var clock atomic.Int64
	logs := &lockedBuffer{}
	sc := &scheduler{
		config: schedules, pool: b.pool, queries: b.queries, producer: b.client,
		now: func() time.Time { return time.Unix(0, clock.Load()).UTC() }, log: slog.New(slog.NewTextHandler(logs, nil)),
	}
	// pass runs the schedules at t0 + at, in n schedulers at once.
	pass := func(at time.Duration, n int) {
		t.Helper()
		clock.Store(t0.Add(at).UnixNano())
		var wg sync.WaitGroup
		errs := make(chan error, n*len(schedules))
		for range n {
			for _, s := range schedules {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- sc.scheduleOne(ctx, s)
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// want checks that name's ticks are t0 + from .. t0 + to, each once.
	want := func(name string, from, to int) {
		t.Helper()
		var at []time.Time
		if err := b.pool.QueryRow(ctx, "SELECT coalesce(array_agg(run_at ORDER BY run_at), '{}') FROM skiplock_tasks WHERE name = $1", name).Scan(&at); err != nil {
			t.Fatal(err)
		}
		ok := len(at) == to-from+1
		for i := 0; ok && i < len(at); i++ {
			ok = at[i].Equal(t0.Add(time.Duration(from+i) * time.Second))
		}
		if !ok {
			t.Errorf("%s: ticks %v, want each second from t0+%ds to t0+%ds", name, at, from, to)
		}
	}
	// 15 s late: the ticks of t0+1s..t0+4s are more than 10 s late.
	pass(15*time.Second, 1)
	for _, name := range []string{"every", "cron"} {
		want(name, 5, 15)
		want(name+"-catchup", 4, 15)
	}
	if n := strings.Count(logs.String(), "missed=4 "); n != 4 {
		t.Errorf("%d logs of 4 missed ticks, want one per schedule:\n%s", n, logs)
	}
	// Again at the same time, then 7 s later in four schedulers at once
	// (a handover): each tick once, and nothing more is logged.
	pass(15*time.Second, 1)
	pass(22*time.Second, 4)
	for _, name := range []string{"every", "cron"} {
		want(name, 5, 22)
		want(name+"-catchup", 4, 22)
	}
	if n := strings.Count(logs.String(), "missed ticks"); n != 4 {
		t.Errorf("%d logs of missed ticks, want 4:\n%s", n, logs)
	}
}

// TestScheduleDue: which ticks of a schedule come due, on time or missed,
// and of a stored schedule changed since its last tick.
func TestScheduleDue(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	for _, tc := range []struct {
		what      string
		changedAt time.Time
		last, now time.Time
		onTime    []time.Time
		missed    int
		latest    time.Time
	}{
		{what: "on time", last: sec(0), now: sec(3), onTime: []time.Time{sec(1), sec(2), sec(3)}, latest: sec(3)},
		{what: "nothing due", last: sec(3), now: sec(3).Add(900 * time.Millisecond)},
		{what: "some late", last: sec(0), now: sec(12), onTime: []time.Time{sec(2), sec(3), sec(4), sec(5), sec(6), sec(7), sec(8), sec(9), sec(10), sec(11), sec(12)}, missed: 1, latest: sec(12)},
		{what: "changed: the new spec's ticks from the change on", changedAt: sec(4).Add(500 * time.Millisecond), last: sec(0), now: sec(6),
			onTime: []time.Time{sec(5), sec(6)}, latest: sec(6)},
		{what: "changed, nothing due since", changedAt: sec(4).Add(500 * time.Millisecond), last: sec(0), now: sec(4).Add(900 * time.Millisecond)},
		{what: "changed before the last tick", changedAt: sec(-5), last: sec(0), now: sec(2), onTime: []time.Time{sec(1), sec(2)}, latest: sec(2)},
		{what: "changed on the database's clock, ahead", changedAt: sec(9), last: sec(0), now: sec(3)},
		{what: "long outage", last: sec(-86400 * 400), now: sec(12), onTime: []time.Time{sec(2), sec(3), sec(4), sec(5), sec(6), sec(7), sec(8), sec(9), sec(10), sec(11), sec(12)}, missed: 400*86400 + 1, latest: sec(12)},
	} {
		s := schedule{PeriodicTask: PeriodicTask{Every: time.Second}, changedAt: tc.changedAt}
		d := s.due(tc.last, tc.now, 10*time.Second)
		if fmt.Sprint(d.onTime) != fmt.Sprint(tc.onTime) || d.missed != tc.missed || !d.latest.Equal(tc.latest) {
			t.Errorf("%s: on time %v, missed %d, latest %s; want %v, %d, %s", tc.what, d.onTime, d.missed, d.latest, tc.onTime, tc.missed, tc.latest)
		}
	}
}

// lockedBuffer is a log destination that a test reads while schedulers
// write.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
