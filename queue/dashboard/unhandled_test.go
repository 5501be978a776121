package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

// TestQueuesPageUnhandled: the queues page lists the pending tasks whose
// name no live worker handles, with their count, and leaves out a name a
// live worker handles; the workers page lists the names each handles.
func TestQueuesPageUnhandled(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	c := browserless(t)
	b.insert(t, "mail", "mail.handled", queue.StatusPending, "", "", 0)
	if _, err := b.pool.Exec(context.Background(), `INSERT INTO skiplock_workers (id, host, pid, queues, names)
		VALUES ('w', 'h', 1, '{mail}', '{mail.handled}')`); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.insert(t, "mail", "mail.orphan", queue.StatusPending, "", "", 0)
	}
	code, body := get(t, c, b.url+"/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d", code)
	}
	i := strings.Index(body, "Waiting for a handler")
	if i < 0 {
		t.Fatalf("the queues page lacks the tasks waiting for a handler:\n%s", body)
	}
	section := body[i:]
	if !strings.Contains(section, "mail.orphan") || !strings.Contains(section, `<td class="n">3</td>`) {
		t.Fatalf("the section lacks mail.orphan with 3 tasks:\n%s", section)
	}
	if strings.Contains(section, "mail.handled") {
		t.Fatalf("the section lists a name a live worker handles:\n%s", section)
	}
	// The workers page says which names each worker handles.
	if _, body := get(t, c, b.url+"/locks"); !strings.Contains(body, "<th>Handles</th>") || !strings.Contains(body, "<td>mail.handled</td>") {
		t.Fatalf("the workers page lacks the names the worker handles:\n%s", body)
	}
}
