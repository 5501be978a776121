package worker

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

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
