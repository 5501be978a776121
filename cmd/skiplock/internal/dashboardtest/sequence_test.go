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

// seedSequence enqueues four tasks of a sequence whose key needs escaping
// in a URL, and moves it on as workers would: the first completed, the
// second failed for good and holding the rest.
func seedSequence(t *testing.T, b *bundle) (string, []int64) {
	t.Helper()
	ctx := context.Background()
	const key = "tenant/7:ledger & co"
	var ids []int64
	for n := range 4 {
		id, err := b.client.Enqueue(ctx, "ledger.apply", n, queue.WithSequence(key), queue.WithSequenceHold())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id.ID)
	}
	for _, q := range []string{
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'completed', attempt = 1, finished_at = now() WHERE id = %d`, ids[0]),
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'failed', attempt = 1, finished_at = now(),
			errors = '[{"attempt": 1, "outcome": "error", "error": "ledger closed"}]' WHERE id = %d`, ids[1]),
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return key, ids
}

// TestBrowserSequence follows the link from a task to its sequence in a
// real browser: the tasks in order, the head marked, the hold explained.
func TestBrowserSequence(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	b := setup(t, dashboard.Options{Refresh: time.Second})
	_, ids := seedSequence(t, b)
	do(t, ctx, chromedp.EmulateViewport(1400, 800))

	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", b.url, ids[3])), chromedp.WaitVisible(chromedp.ID("sequence")))
	do(t, ctx, chromedp.Click(chromedp.ID("sequence"), chromedp.NodeVisible))
	waitJS(t, ctx, "the sequence page", `!!document.querySelector("table.sequence")`)
	live(t, ctx, false)

	rows := eval[[]string](t, ctx, `[...document.querySelectorAll("table.sequence tbody tr")].map(r => r.id + "=" + r.querySelector(".badge:not(.head):not(.hold)").textContent)`)
	want := fmt.Sprintf("task-%d=completed task-%d=failed task-%d=waiting task-%d=waiting", ids[0], ids[1], ids[2], ids[3])
	if got := strings.Join(rows, " "); got != want {
		t.Errorf("rows %q, want %q", got, want)
	}
	if got := text(t, ctx, "#head"); !strings.Contains(got, fmt.Sprintf("Held by task %d", ids[1])) {
		t.Errorf("head line %q", got)
	}
	if got := text(t, ctx, "tr.head"); !strings.Contains(got, "head") {
		t.Errorf("head row %q", got)
	}
	screenshot(t, ctx, "sequence")
}
