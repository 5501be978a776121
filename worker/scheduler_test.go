package worker

import (
	"context"
	"fmt"
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
		{Every: time.Minute, Name: "report"},
		{Cron: "*/5 * * * *", Name: "digest"},
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
			config: schedules, lead: func(context.Context) bool { return true },
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
