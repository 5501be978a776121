package worker

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/db"
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
		onWork: func(q string, _ uint32) { woken <- q }, onControl: func(msg string) { commands <- msg },
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
	if _, err := b.client.Cancel(context.Background(), queue.CancelRequest{Filter: queue.Filter{IDs: []int64{rows[0].ID}, Statuses: []queue.Status{queue.StatusRunning}}}); err != nil {
		t.Fatal(err)
	}
	msg := waitFor(t, commands, "a cancel command")
	if id, ok := control.ParseCancel(msg); !ok || id != rows[0].ID {
		t.Errorf("command %q, want the cancellation of task %d", msg, rows[0].ID)
	}
}

// A worker passes over its own announcements that a place is free, once
// each, recognised by the backend that sent them; another backend's, and
// one of its own that came back too late to be recognised, wake it.
func TestOwnFreedAnnouncements(t *testing.T) {
	t.Parallel()
	var o ownFreed
	o.sending(10)
	o.sending(10)
	if o.own(11) {
		t.Error("another backend's announcement taken for the worker's own")
	}
	if !o.own(10) || !o.own(10) {
		t.Error("the worker's own two announcements not recognised")
	}
	if o.own(10) {
		t.Error("a third announcement from the backend taken for one of the two sent")
	}
	o.sending(12)
	o.mu.Lock()
	o.sent[12][0] = time.Now().Add(-2 * ownFreedTTL)
	o.mu.Unlock()
	if o.own(12) {
		t.Error("an announcement older than ownFreedTTL still recognised")
	}
	o.mu.Lock()
	left := len(o.sent)
	o.mu.Unlock()
	if left != 0 {
		t.Errorf("%d backends still remembered", left)
	}
}

// A claim that took again every limit block its unlocks released, and
// every exclusive key its unlocks' outcomes freed, leaves no place free to
// announce; one that left any of them, or released none, does not say so.
func TestRetook(t *testing.T) {
	t.Parallel()
	rows := []db.TaskClaimRow{{LimitLocks: []int32{5, 7}}, {LimitLocks: []int32{9}, ExclusiveKey: "a"}, {ExclusiveKey: "b"}}
	for _, c := range []struct {
		unlocked []int32
		keys     []string
		want     bool
	}{
		{[]int32{5}, nil, true},
		{[]int32{9, 7}, nil, true},
		{[]int32{5, 6}, nil, false},
		{nil, []string{"a"}, true},
		{nil, []string{"b", "a"}, true},
		{nil, []string{"a", "c"}, false},
		{[]int32{5}, []string{"b"}, true},
		{[]int32{6}, []string{"b"}, false},
		{[]int32{5}, []string{"c"}, false},
		{nil, nil, false},
	} {
		if got := retook(c.unlocked, c.keys, rows); got != c.want {
			t.Errorf("retook(%v, %q) = %v, want %v", c.unlocked, c.keys, got, c.want)
		}
	}
	if retook([]int32{5}, nil, nil) || retook(nil, []string{"a"}, nil) {
		t.Error("a claim that took nothing took a place again")
	}
}
