package worker

import (
	"context"
	"testing"

	"github.com/skiplock/skiplock/internal/control"
	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/queue"
)

func TestListenerHandsOverWorkAndCommands(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	work, ctl := schema.Channels(b.schema.Name)
	woken, commands := make(chan string, 10), make(chan string, 10)
	l := &listener{
		config: b.pool.Config().ConnConfig.Copy(), work: work, control: ctl,
		onWork: func(q string) { woken <- q }, onControl: func(msg string) { commands <- msg },
		onListen: func() {}, log: b.log, listening: make(chan struct{}),
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go l.run(ctx)
	waitFor(t, l.listening, "LISTEN")
	if err := b.client.ResumeQueue(context.Background(), "mail"); err != nil {
		t.Fatal(err)
	}
	if q := waitFor(t, woken, "a work notification"); q != "mail" {
		t.Errorf("woke queue %q, want mail", q)
	}
	g := newGuard(b.deps(t, "w1", ModeLease, nil, nil))
	rows := b.claim(t, g, "w1", 1)
	if _, err := b.client.Cancel(context.Background(), queue.CancelRequest{IDs: []int64{rows[0].ID}, Filter: queue.Filter{Statuses: []queue.Status{queue.StatusRunning}}}); err != nil {
		t.Fatal(err)
	}
	msg := waitFor(t, commands, "a cancel command")
	if id, ok := control.ParseCancel(msg); !ok || id != rows[0].ID {
		t.Errorf("command %q, want the cancellation of task %d", msg, rows[0].ID)
	}
}
