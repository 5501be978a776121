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

// seedWorkflow enqueues a fan-out, fan-in workflow and moves it on as
// workers would: fetch completed, small failed for good (cancelling
// publish), large still pending.
func seedWorkflow(t *testing.T, b *bundle) queue.EnqueuedWorkflow {
	t.Helper()
	ctx := context.Background()
	enq, err := b.client.EnqueueWorkflow(ctx, queue.Workflow{Name: "thumbnails", Steps: []queue.Step{
		{Name: "fetch"},
		{Name: "small", Task: "resize", DependsOn: []string{"fetch"}},
		{Name: "large", Task: "resize", DependsOn: []string{"fetch"}},
		{Name: "publish", DependsOn: []string{"small", "large"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'completed', attempt = 1, finished_at = now() WHERE id = %d`, enq.TaskIDs["fetch"]),
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'failed', attempt = 1, finished_at = now() WHERE id = %d`, enq.TaskIDs["small"]),
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return enq
}

func TestWorkflowPage(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	enq := seedWorkflow(t, b)
	code, body := get(t, http.DefaultClient, fmt.Sprintf("%s/workflows/%d", b.url, enq.ID))
	if code != http.StatusOK {
		t.Fatalf("GET /workflows/%d: %d", enq.ID, code)
	}
	for _, want := range []string{
		`<span class="name">thumbnails</span>`,
		"4 tasks: 1 pending, 1 completed, 1 failed, 1 cancelled",
		fmt.Sprintf(`<a class="node cancelled" href="/tasks/%d"`, enq.TaskIDs["publish"]),
		"after small, large",
		fmt.Sprintf("dependency %d (resize) failed for good", enq.TaskIDs["small"]),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("workflow page lacks %q", want)
		}
	}
	if code, _ := get(t, http.DefaultClient, b.url+"/workflows/999999"); code != http.StatusNotFound {
		t.Errorf("unknown workflow: %d", code)
	}
	_, body = get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", b.url, enq.TaskIDs["publish"]))
	if !strings.Contains(body, fmt.Sprintf(`<a href="/workflows/%d" id="workflow">`, enq.ID)) {
		t.Errorf("a workflow task's page does not link its workflow")
	}
}
