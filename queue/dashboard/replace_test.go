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

// A task's page shows its replace key, escaped; a task without one shows
// no such line.
func TestTaskPageReplaceKey(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	ctx := context.Background()
	keyed, err := b.client.Enqueue(ctx, "doc.index", 1, queue.WithReplaceKey("doc:<42>"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := b.client.Enqueue(ctx, "doc.index", 2)
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", b.url, keyed.ID))
	if code != http.StatusOK || !strings.Contains(body, `<dt>Replace key</dt><dd id="replace-key">doc:&lt;42&gt;</dd>`) {
		t.Fatalf("keyed task's page: %d, no replace key:\n%s", code, body)
	}
	code, body = get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", b.url, plain.ID))
	if code != http.StatusOK || strings.Contains(body, "Replace key") {
		t.Fatalf("plain task's page: %d, shows a replace key", code)
	}
}
