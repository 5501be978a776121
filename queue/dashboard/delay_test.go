package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/skiplock/skiplock/queue/dashboard"
)

// The enqueue form's delay reads the command's duration syntax: days too.
func TestEnqueueDelayInDays(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	c := browserless(t)
	_, body := get(t, c, b.url+"/enqueue")
	token := csrfField.FindStringSubmatch(body)[1]
	for _, delay := range []string{"1d", "1y"} {
		resp, err := c.PostForm(b.url+"/enqueue", url.Values{"csrf": {token}, "name": {"later-" + delay}, "delay": {delay}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if delay == "1d" && resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("POST /enqueue with delay 1d: %s, want 303", resp.Status)
		}
	}
	var in time.Duration
	var refused int
	err := b.pool.QueryRow(context.Background(), `SELECT
		(SELECT run_at - now() FROM skiplock_tasks WHERE name = 'later-1d'),
		(SELECT count(*) FROM skiplock_tasks WHERE name = 'later-1y')`).Scan(&in, &refused)
	if err != nil || in < 23*time.Hour || in > 25*time.Hour || refused != 0 {
		t.Fatalf("delay 1d runs in %v, delay 1y enqueued %d tasks (%v); want about 24h and none", in, refused, err)
	}
}
