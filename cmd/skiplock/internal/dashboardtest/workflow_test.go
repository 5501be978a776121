package dashboardtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

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

// TestBrowserWorkflow looks at a workflow's page in a real browser: the DAG
// in columns by level, each task with its state; a task's page leads to it.
func TestBrowserWorkflow(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	b := setup(t, dashboard.Options{Refresh: time.Second})
	enq := seedWorkflow(t, b)
	do(t, ctx, chromedp.EmulateViewport(1400, 800))

	// From a task of it, by the link.
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", b.url, enq.TaskIDs["large"])), chromedp.WaitVisible(chromedp.ID("workflow")))
	do(t, ctx, chromedp.Click(chromedp.ID("workflow"), chromedp.NodeVisible))
	waitJS(t, ctx, "the workflow page", `!!document.querySelector(".dag")`)
	live(t, ctx, false)

	levels := eval[[]int](t, ctx, `[...document.querySelectorAll(".dag .level")].map(l => l.querySelectorAll(".node").length)`)
	if fmt.Sprint(levels) != "[1 2 1]" {
		t.Errorf("nodes per level %v, want [1 2 1]", levels)
	}
	states := eval[[]string](t, ctx, `[...document.querySelectorAll(".dag .node")].map(n => n.querySelector(".step").textContent + "=" + n.querySelector(".badge").textContent)`)
	if got := strings.Join(states, " "); got != "fetch=completed small=failed large=pending publish=cancelled" {
		t.Errorf("states %q", got)
	}
	// Side by side, left to right: level 1's nodes are right of level 0's.
	if !eval[bool](t, ctx, `(() => { const l = document.querySelectorAll(".dag .level"); return l[0].getBoundingClientRect().right <= l[1].getBoundingClientRect().left; })()`) {
		t.Error("levels are not laid out left to right")
	}
	screenshot(t, ctx, "workflow")

	do(t, ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf("#task-%d", enq.TaskIDs["publish"])), chromedp.NodeVisible))
	waitJS(t, ctx, "publish's page", `!!document.querySelector("dd.deps")`)
	if got := text(t, ctx, "table.attempts"); !strings.Contains(got, "failed for good") {
		t.Errorf("publish's history: %q", got)
	}
}
