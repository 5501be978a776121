package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

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

func TestSequencePage(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	key, ids := seedSequence(t, b)
	page := b.url + "/sequence?key=" + url.QueryEscape(key)
	code, body := get(t, http.DefaultClient, page)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d", page, code)
	}
	for _, want := range []string{
		`<span class="name">tenant/7:ledger &amp; co</span>`,
		"4 tasks: 2 waiting, 1 completed, 1 failed",
		fmt.Sprintf(`Held by <a href="/tasks/%d">task %d</a>, which failed for good`, ids[1], ids[1]),
		fmt.Sprintf(`<tr id="task-%d" class="head">`, ids[1]),
		"ledger closed",
		"waiting for its turn in sequence",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("sequence page lacks %q", want)
		}
	}
	// Rows in sequence order.
	last := -1
	for _, id := range ids {
		i := strings.Index(body, fmt.Sprintf(`<tr id="task-%d"`, id))
		if i < last {
			t.Errorf("task %d is out of order on the page", id)
		}
		last = i
	}
	if code, _ := get(t, http.DefaultClient, b.url+"/sequence?key=nope"); code != http.StatusNotFound {
		t.Errorf("unknown sequence: %d", code)
	}
	if code, _ := get(t, http.DefaultClient, b.url+"/sequence"); code != http.StatusBadRequest {
		t.Errorf("no key: %d", code)
	}
	_, body = get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", b.url, ids[2]))
	m := regexp.MustCompile(`<a href="/sequence\?key=([^"]*)" id="sequence">`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("a sequenced task's page does not link its sequence")
	}
	if got, err := url.QueryUnescape(html.UnescapeString(m[1])); err != nil || got != key {
		t.Errorf("the link's key is %q (%v), want %q", got, err, key)
	}
}
