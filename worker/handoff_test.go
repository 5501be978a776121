package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TestHandoffInClaim: a task that held its exclusive key, or the only
// place of its queue's limit, ends (completed, or failed for good: the
// write of any outcome) in the transaction of the claim that
// starts the next task waiting for that place, so that the place passes
// from one to the next in one commit. The two rows' times are the
// transaction's: each task's started_at is the finished_at of the task
// before it. No poll comes, and no outcome goes to the completer: a place
// that was not handed on in the claim leaves its next task waiting.
func TestHandoffInClaim(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		limit, fail bool
	}{{"exclusive key", false, false}, {"queue limit", true, false}, {"exclusive key, failed", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			opts := []queue.Option{queue.WithExclusiveKey("k")}
			if c.limit {
				if err := b.client.SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: 1}); err != nil {
					t.Fatal(err)
				}
				opts = nil
			}
			const n = 20
			tasks := make([]queue.NewTask, n)
			for i := range tasks {
				tasks[i] = queue.NewTask{Name: "job", Options: opts}
			}
			if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
				t.Fatal(err)
			}
			var place atOnce
			work := func(context.Context, *worker.Task) error {
				defer place.enter()()
				time.Sleep(2 * time.Millisecond)
				if c.fail {
					return worker.Permanent(errors.New("no"))
				}
				return nil
			}
			cfg := worker.Config{PollInterval: time.Hour}
			worker.SetHandoffWait(&cfg, time.Hour)
			start(t, b.pool, cfg, worker.Handlers{"job": work})
			status := "completed"
			if c.fail {
				status = "failed"
			}
			pgtest.Eventually(t, 30*time.Second, "every task to end", func() bool {
				return b.count(t, "status = $1", status) == n
			})
			rows, err := b.pool.Query(ctx, "SELECT started_at, finished_at FROM skiplock_tasks ORDER BY started_at")
			if err != nil {
				t.Fatal(err)
			}
			var started, finished []time.Time
			for rows.Next() {
				var s, f time.Time
				if err := rows.Scan(&s, &f); err != nil {
					t.Fatal(err)
				}
				started, finished = append(started, s), append(finished, f)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(started); i++ {
				if !started[i].Equal(finished[i-1]) {
					t.Errorf("task %d of %d started at %s, not in the transaction that ended the one before it (%s)",
						i+1, n, started[i].Format(time.RFC3339Nano), finished[i-1].Format(time.RFC3339Nano))
				}
			}
			if p := place.peak.Load(); p > 1 {
				t.Errorf("%d tasks ran at once in one place", p)
			}
		})
	}
}

// emptyClaims counts the claims that took nothing, and when the last was.
type emptyClaims struct {
	worker.NopObserver
	mu    sync.Mutex
	times []time.Time
}

func (o *emptyClaims) Claimed(_ string, _, got int) {
	if got == 0 {
		o.mu.Lock()
		o.times = append(o.times, time.Now())
		o.mu.Unlock()
	}
}

// TestBusyLoopDoesNotPoll: the poll comes PollInterval after a claim
// loop's last claim. A loop that hands an exclusive key from task to task,
// each in a claim of its own, claims far more often than that and makes no
// claim of its own accord: none that takes nothing while the key's tasks
// run. On a fixed tick it made one every PollInterval, each finding the
// key taken.
func TestBusyLoopDoesNotPoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const n = 80
	tasks := make([]queue.NewTask, n)
	for i := range tasks {
		tasks[i] = queue.NewTask{Name: "job", Options: []queue.Option{queue.WithExclusiveKey("k")}}
	}
	if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lastStart time.Time
	work := func(context.Context, *worker.Task) error {
		mu.Lock()
		lastStart = time.Now()
		mu.Unlock()
		time.Sleep(15 * time.Millisecond)
		return nil
	}
	obs := &emptyClaims{}
	cfg := worker.Config{PollInterval: 100 * time.Millisecond, Observer: obs}
	worker.SetHandoffWait(&cfg, time.Hour)
	start(t, b.pool, cfg, worker.Handlers{"job": work})
	pgtest.Eventually(t, 60*time.Second, "every task to complete", func() bool {
		return b.count(t, "status = 'completed'") == n
	})
	mu.Lock()
	last := lastStart
	mu.Unlock()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	var during []time.Time
	for _, at := range obs.times {
		if at.Before(last) {
			during = append(during, at)
		}
	}
	// A few may come from wake-ups that arrived while a claim was in
	// flight (the backlog's notification, a handler's end): on a tick the
	// loop made 14 here.
	if len(during) > 3 {
		t.Errorf("%d claims took nothing while the key's %d tasks ran (%d ms of them), want at most 3: the loop polled",
			len(during), n, n*15)
	}
}
