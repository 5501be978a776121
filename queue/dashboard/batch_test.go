package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

// The batches page lists batches with their counts; a batch's page shows
// its members and callbacks, and a member's page links its batch.
func TestBatchPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, dashboard.Options{})
	batch := queue.Batch{Name: "nightly import", OnFinish: queue.NewTask{Name: "report"}, OnSuccess: queue.NewTask{Name: "announce"}}
	batch.Add("import", 1).Add("import", 2)
	enq, err := b.client.EnqueueBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'completed', attempt = 1, finished_at = now() WHERE id = %d`, enq.TaskIDs[0]),
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'failed', attempt = 1, finished_at = now() WHERE id = %d`, enq.TaskIDs[1]),
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	code, body := get(t, http.DefaultClient, b.url+"/batches")
	if code != http.StatusOK {
		t.Fatalf("GET /batches: %d", code)
	}
	for _, want := range []string{
		fmt.Sprintf(`<a href="/batches/%d">%d</a>`, enq.ID, enq.ID),
		"nightly import",
		`<span class="badge completed">finished</span>`,
		fmt.Sprintf(`<a href="/tasks/%d">#%d</a>`, enq.OnFinishTaskID, enq.OnFinishTaskID),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("batches page lacks %q", want)
		}
	}
	if _, body := get(t, http.DefaultClient, b.url+"/batches?state=running"); !strings.Contains(body, "No batch matches.") {
		t.Errorf("batches page, running: a finished batch is listed")
	}
	if code, _ := get(t, http.DefaultClient, b.url+"/batches?state=done"); code != http.StatusBadRequest {
		t.Errorf("unknown state: %d", code)
	}

	code, body = get(t, http.DefaultClient, fmt.Sprintf("%s/batches/%d", b.url, enq.ID))
	if code != http.StatusOK {
		t.Fatalf("GET /batches/%d: %d", enq.ID, code)
	}
	for _, want := range []string{
		"2 members: 1 completed, 1 failed, 0 cancelled, 0 not finished",
		"on finish", "on success",
		fmt.Sprintf("batch %d finished with 1 completed, 1 failed and 0 cancelled of 2", enq.ID),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("batch page lacks %q", want)
		}
	}
	if code, _ := get(t, http.DefaultClient, b.url+"/batches/999999"); code != http.StatusNotFound {
		t.Errorf("unknown batch: %d", code)
	}
	_, body = get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", b.url, enq.TaskIDs[0]))
	if !strings.Contains(body, fmt.Sprintf(`<a href="/batches/%d" id="batch">`, enq.ID)) {
		t.Errorf("a member's page does not link its batch")
	}
}
