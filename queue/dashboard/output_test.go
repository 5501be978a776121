package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

// A task's page shows its output, escaped, and no Output heading when
// there is none.
func TestTaskPageOutput(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	id := b.insert(t, "images", "resize", queue.StatusCompleted, "", "", time.Minute)
	if _, err := b.pool.Exec(context.Background(), `UPDATE skiplock_tasks SET output = '{"url": "<b>s3</b>"}' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	none := b.insert(t, "images", "resize", queue.StatusCompleted, "", "", time.Minute)

	code, body := get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", b.url, id))
	if code != http.StatusOK || !strings.Contains(body, `<h2>Output</h2>`) ||
		!strings.Contains(body, `<pre class="payload" id="output">{
  &#34;url&#34;: &#34;&lt;b&gt;s3&lt;/b&gt;&#34;
}</pre>`) {
		t.Fatalf("GET /tasks/%d: %d\n%s", id, code, body)
	}
	if _, body := get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", b.url, none)); strings.Contains(body, "<h2>Output</h2>") {
		t.Fatalf("a task without output has an Output heading:\n%s", body)
	}
}

// A task's page shows its progress and checkpoint, escaped, and neither
// heading when there is none.
func TestTaskPageProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	id := b.insert(t, "imports", "import", queue.StatusRunning, "", "", time.Minute)
	if _, err := b.pool.Exec(context.Background(), `UPDATE skiplock_tasks SET progress = '0.4', checkpoint = '{"after": "<id>"}' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	none := b.insert(t, "imports", "import", queue.StatusCompleted, "", "", time.Minute)

	code, body := get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", b.url, id))
	if code != http.StatusOK || !strings.Contains(body, "<h2>Progress</h2>\n<pre class=\"payload\" id=\"progress\">0.4</pre>") ||
		!strings.Contains(body, `<pre class="payload" id="checkpoint">{
  &#34;after&#34;: &#34;&lt;id&gt;&#34;
}</pre>`) {
		t.Fatalf("GET /tasks/%d: %d\n%s", id, code, body)
	}
	if _, body := get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", b.url, none)); strings.Contains(body, "<h2>Progress</h2>") || strings.Contains(body, "<h2>Checkpoint</h2>") {
		t.Fatalf("a task without progress has its headings:\n%s", body)
	}
}
