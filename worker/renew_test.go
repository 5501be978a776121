package worker

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLeaseRenewerCancelsLostTasks(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	g := newGuard(b.deps(t, "w1", ModeLease, nil, nil))
	rows := b.claim(t, g, "w1", 2)
	kept, lost := executionOf(rows[0]), executionOf(rows[1])
	// Rescued from under this worker: its lease can no longer be renewed.
	b.exec(t, "UPDATE skiplock_tasks SET status = 'pending', worker_id = NULL, locked_until = NULL WHERE id = $1", rows[1].ID)
	b.exec(t, "UPDATE skiplock_tasks SET locked_until = '2000-01-01' WHERE id = $1", rows[0].ID)
	type cancelled struct {
		e     *execution
		cause error
	}
	cancels := make(chan cancelled, 2)
	r := &leaseRenewer{
		// Renews every second, each renewal given a second: at 300 ms, a
		// -count=3 run beside other test runs (load 32) had renewals time
		// out for a whole lease, and the renewer rightly cancelled both.
		queries: b.queries, pool: b.pool, workerID: "w1", lease: 3 * time.Second,
		running: func() []*execution { return []*execution{kept, lost} },
		cancel: func(e *execution, cause error) {
			select {
			case cancels <- cancelled{e, cause}:
			default: // cancelled again on a later pass
			}
		},
		observer: NopObserver{}, log: b.log,
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go r.run(ctx)
	c := waitFor(t, cancels, "the lost task's cancellation")
	if c.e != lost || !errors.Is(c.cause, errLockLost) {
		t.Fatalf("cancelled task %d with %v, want task %d with errLockLost", c.e.task.ID, c.cause, lost.task.ID)
	}
	var renewed bool
	if err := b.pool.QueryRow(context.Background(), "SELECT locked_until > '2001-01-01' FROM skiplock_tasks WHERE id = $1", rows[0].ID).Scan(&renewed); err != nil {
		t.Fatal(err)
	}
	if !renewed {
		t.Error("the kept task's lease was not renewed")
	}
}
