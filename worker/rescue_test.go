package worker

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/skiplock/skiplock/internal/schema"
)

type rescueCounter struct {
	NopObserver
	rescued atomic.Int64
}

func (o *rescueCounter) Rescued(string, string) { o.rescued.Add(1) }

func TestRescuerReturnsExpiredLeases(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	g := newGuard(b.deps(t, "w1", ModeLease, nil, nil))
	rows := b.claim(t, g, "w1", 2)
	b.exec(t, "UPDATE skiplock_tasks SET locked_until = now() - interval '1 second' WHERE id = $1", rows[0].ID)
	obs := &rescueCounter{}
	work, _ := schema.Channels(b.schema.Name)
	r := &rescuer{
		queries: b.queries, pool: b.pool, classOID: b.schema.TableOID, channel: work,
		beforeRescue: g.beforeRescue, observer: obs, log: b.log,
	}
	r.rescue(context.Background())
	if s := b.status(t, rows[0].ID); s != "pending" {
		t.Errorf("task with an expired lease is %s, want pending", s)
	}
	if s := b.status(t, rows[1].ID); s != "running" {
		t.Errorf("task with a live lease is %s, want running", s)
	}
	if n := obs.rescued.Load(); n != 1 {
		t.Errorf("observer saw %d rescues, want 1", n)
	}
}
