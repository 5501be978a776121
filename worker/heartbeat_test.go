package worker

import (
	"context"
	"testing"
	"time"
)

func TestRowHeartbeat(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	row := workerRow{queries: b.queries, id: "w1", host: "test", pid: 1, queues: []string{"default"}}
	if err := row.register(ctx, b.pool, 0); err != nil {
		t.Fatal(err)
	}
	b.exec(t, "UPDATE skiplock_workers SET heartbeat_at = now() - interval '1 hour'")
	h := &rowHeartbeat{row: row, pool: b.pool, every: time.Second, log: b.log}
	if err := h.beat(ctx); err != nil {
		t.Fatal(err)
	}
	var fresh bool
	if err := b.pool.QueryRow(ctx, "SELECT heartbeat_at > now() - interval '1 minute' FROM skiplock_workers WHERE id = 'w1'").Scan(&fresh); err != nil {
		t.Fatal(err)
	}
	if !fresh {
		t.Error("heartbeat_at not moved forward")
	}
}
