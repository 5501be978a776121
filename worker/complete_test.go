package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/queue"
)

// The completer writes a batch, then releases its guards, then frees its
// slots, and wakes the claim loops for a retry that is due at once.
func TestCompleterOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var steps []string
	step := func(s string) {
		mu.Lock()
		steps = append(steps, s)
		mu.Unlock()
	}
	written := make(chan []int64, 2)
	c := newCompleter(
		func(_ context.Context, p db.TaskFinishManyParams) ([]int64, error) {
			step("write")
			written <- p.Ids
			return p.Ids, nil
		},
		func([]finish) { step("release") },
		func([]finish) { step("free") },
		func(string) { step("wake") },
		slog.New(slog.NewTextHandler(io.Discard, nil)),
		maxWrites,
	)
	// Both wait before the completer starts: one batch.
	c.add(finish{id: 1, status: queue.StatusCompleted})
	c.add(finish{id: 2, status: queue.StatusPending, delayMs: 0})
	go c.run()
	c.close()
	close(written)
	var ids []int64
	for batch := range written {
		ids = append(ids, batch...)
	}
	if !slices.Equal(ids, []int64{1, 2}) {
		t.Fatalf("wrote %v, want [1 2]", ids)
	}
	if !slices.Equal(steps, []string{"write", "release", "free", "wake"}) {
		t.Fatalf("steps %v, want one write, then release, free and wake", steps)
	}
}

// The completer gathers outcomes in buffers it reuses once their write is
// done: under concurrent adds, with writes in flight at once and more
// outcomes waiting than one write takes, every outcome is written exactly
// once, and each batch is unchanged from its write to its release.
func TestCompleterReusesBuffers(t *testing.T) {
	t.Parallel()
	const early, adders, each = 2*pendingCap + 500, 8, 2500
	var mu sync.Mutex
	writes, releases := map[int64]int{}, map[int64]int{}
	var torn []string
	c := newCompleter(
		func(_ context.Context, p db.TaskFinishManyParams) ([]int64, error) {
			mu.Lock()
			for _, id := range p.Ids {
				writes[id]++
			}
			mu.Unlock()
			time.Sleep(time.Millisecond) // lets adds and other writes overlap it
			return p.Ids, nil
		},
		func(batch []finish) {
			mu.Lock()
			for _, f := range batch {
				releases[f.id]++
			}
			mu.Unlock()
			for _, f := range batch {
				if f.id == 0 || f.status != queue.StatusCompleted || f.queue != fmt.Sprint("q", f.id%3) {
					mu.Lock()
					torn = append(torn, fmt.Sprintf("%+v", f))
					mu.Unlock()
				}
			}
		},
		func([]finish) {},
		func(string) {},
		slog.New(slog.NewTextHandler(io.Discard, nil)),
		maxWrites,
	)
	add := func(id int64) {
		c.add(finish{id: id, status: queue.StatusCompleted, delayMs: -1, queue: fmt.Sprint("q", id%3)})
	}
	for id := int64(1); id <= early; id++ { // more than two writes' worth before the first
		add(id)
	}
	go c.run()
	var wg sync.WaitGroup
	for a := range adders {
		wg.Go(func() {
			for i := range each {
				add(int64(early + a*each + i + 1))
				if i%50 == 0 {
					time.Sleep(100 * time.Microsecond) // spreads the adds over many writes
				}
			}
		})
	}
	wg.Wait()
	c.close()
	if len(torn) > 0 {
		t.Fatalf("%d outcomes changed between their write and their release, first %s", len(torn), torn[0])
	}
	for id := int64(1); id <= early+adders*each; id++ {
		if writes[id] != 1 || releases[id] != 1 {
			t.Fatalf("outcome %d written %d times and released %d times, want once each", id, writes[id], releases[id])
		}
	}
	if len(writes) != early+adders*each {
		t.Fatalf("%d outcomes written, want %d", len(writes), early+adders*each)
	}
}

// With one write allowed in flight, an outcome that holds a scarce place
// (gated) does not wait for the write in flight to end: it goes in a
// write of its own, whose release follows at once. Outcomes of plain tasks
// that come meanwhile wait for the writes in flight, as before.
func TestCompleterWritesGatedAtOnce(t *testing.T) {
	t.Parallel()
	unblock := make(chan struct{})
	started := make(chan []int64, 4)
	released := make(chan []int64, 4)
	c := newCompleter(
		func(_ context.Context, p db.TaskFinishManyParams) ([]int64, error) {
			started <- p.Ids
			if p.Ids[0] == 1 {
				<-unblock // the first write hangs in flight
			}
			return p.Ids, nil
		},
		func(batch []finish) {
			var ids []int64
			for _, f := range batch {
				ids = append(ids, f.id)
			}
			released <- ids
		},
		func([]finish) {},
		func(string) {},
		slog.New(slog.NewTextHandler(io.Discard, nil)),
		1,
	)
	go c.run()
	defer c.close()
	var once sync.Once
	release := func() { once.Do(func() { close(unblock) }) }
	defer release() // before close, which waits for the writes
	c.add(finish{id: 1, status: queue.StatusCompleted, delayMs: -1})
	if got := <-started; !slices.Equal(got, []int64{1}) {
		t.Fatalf("first write %v", got)
	}
	c.add(finish{id: 2, status: queue.StatusCompleted, delayMs: -1, gated: true})
	select {
	case got := <-started:
		if !slices.Equal(got, []int64{2}) {
			t.Fatalf("second write %v, want the gated outcome alone", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the gated outcome waited for the write in flight")
	}
	if got := <-released; !slices.Equal(got, []int64{2}) {
		t.Fatalf("released %v first, want the gated outcome's write", got)
	}
	c.add(finish{id: 3, status: queue.StatusCompleted, delayMs: -1})
	select {
	case got := <-started:
		t.Fatalf("write %v went out with one in flight and nothing gated", got)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if got := <-started; !slices.Equal(got, []int64{3}) {
		t.Fatalf("third write %v", got)
	}
}
