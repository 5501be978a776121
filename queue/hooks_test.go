package queue_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// stampHook adds a metadata entry before the insert and records what was
// inserted.
type stampHook struct {
	mu       sync.Mutex
	inserted []queue.EnqueuedTask
}

func (h *stampHook) BeforeEnqueue(_ context.Context, tasks []*queue.EnqueuedTask) {
	for _, t := range tasks {
		t.Metadata["stamp"] = json.RawMessage(`"` + t.Queue + "/" + t.Name + `"`)
	}
}

func (h *stampHook) AfterEnqueue(_ context.Context, tasks []*queue.EnqueuedTask) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range tasks {
		h.inserted = append(h.inserted, *t)
	}
}

func TestEnqueueHooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hook := &stampHook{}
	client := queue.New(pgtest.Pool(t), queue.WithEnqueueHooks(hook))

	id, err := client.Enqueue(ctx, "a", nil, queue.WithQueue("q1"), queue.WithMetadata(json.RawMessage(`{"mine":1}`)))
	if err != nil {
		t.Fatal(err)
	}
	task, err := client.Get(ctx, id.ID)
	if err != nil {
		t.Fatal(err)
	}
	var md map[string]any
	if err := json.Unmarshal(task.Metadata, &md); err != nil {
		t.Fatal(err)
	}
	if md["stamp"] != "q1/a" || md["mine"] != float64(1) {
		t.Fatalf("metadata = %s, want the producer's entry and the hook's", task.Metadata)
	}

	// A duplicate is not reported as inserted.
	ids, err := client.EnqueueMany(ctx, []queue.NewTask{
		{Name: "b", Options: []queue.Option{queue.WithUniqueKey("k")}},
		{Name: "c", Options: []queue.Option{queue.WithUniqueKey("k")}},
	})
	if err != nil || !ids[1].Duplicate {
		t.Fatalf("%+v, %v; want a duplicate", ids, err)
	}
	var got []int64
	var names []string
	for _, e := range hook.inserted {
		got = append(got, e.ID)
		names = append(names, e.Name)
	}
	if want := []int64{id.ID, ids[0].ID}; !slices.Equal(got, want) || !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("AfterEnqueue saw %v %v, want IDs %v of a and b", got, names, want)
	}
}
