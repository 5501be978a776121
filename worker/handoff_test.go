package worker_test

import (
	"context"
	"errors"
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
