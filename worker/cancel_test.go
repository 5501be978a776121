package worker

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/queue"
)

func TestCancelPollerFindsRequests(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	g := newGuard(b.deps(t, "w1", ModeLease, nil, nil))
	rows := b.claim(t, g, "w1", 2)
	if _, err := b.client.Cancel(context.Background(), queue.CancelRequest{IDs: []int64{rows[1].ID}, Filter: queue.Filter{Statuses: []queue.Status{queue.StatusRunning}}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan []int64, 1)
	p := &cancelPoller{
		queries: b.queries, pool: b.pool, interval: 50 * time.Millisecond,
		running: func() []*execution { return []*execution{executionOf(rows[0]), executionOf(rows[1])} },
		cancel: func(ids []int64) {
			select {
			case got <- ids:
			default:
			}
		},
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go p.run(ctx)
	if ids := waitFor(t, got, "the poller's cancellation"); len(ids) != 1 || ids[0] != rows[1].ID {
		t.Fatalf("poller cancelled %v, want [%d]", ids, rows[1].ID)
	}
}
