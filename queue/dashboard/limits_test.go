package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

// TestLimitsPage: the limits page lists the concurrency limits, with their
// max and running counts, above the rate limits.
func TestLimitsPage(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	if code, body := get(t, http.DefaultClient, b.url+"/ratelimits"); code != http.StatusOK || !strings.Contains(body, "No concurrency limits") {
		t.Fatalf("no limits: %d\n%s", code, body)
	}
	for _, l := range []queue.Limit{{Queue: "reports", Max: 2}, {Key: "tenant:*", Max: 5}} {
		if err := b.client.SetLimit(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	code, body := get(t, http.DefaultClient, b.url+"/ratelimits")
	if code != http.StatusOK || !strings.Contains(body, `<table class="concurrency">`) ||
		!strings.Contains(body, "queue reports") || !strings.Contains(body, "key tenant:*") {
		t.Fatalf("limits: %d\n%s", code, body)
	}
}

// TestLimitsPagePerKey: the limits page lists each per-key rate limit with
// a window open, its keys and the busiest of them; keys whose window has
// ended are not counted.
func TestLimitsPagePerKey(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	if code, body := get(t, http.DefaultClient, b.url+"/ratelimits"); code != http.StatusOK || !strings.Contains(body, "No per-key rate limit has a window open") {
		t.Fatalf("no per-key limits: %d\n%s", code, body)
	}
	// What workers write when they claim tasks of a per-key limited name.
	if _, err := b.pool.Exec(context.Background(), `
		INSERT INTO skiplock_rate_keys (scope, key, window_start, window_end, used) VALUES
			('name:call_api', 'customer-42', now(), now() + interval '1 hour', 10),
			('name:call_api', 'customer-7', now(), now() + interval '1 hour', 3),
			('name:call_api', '', now(), now() + interval '1 hour', 1),
			('name:call_api', 'customer-old', now() - interval '2 hours', now() - interval '1 hour', 9)`); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, http.DefaultClient, b.url+"/ratelimits")
	if code != http.StatusOK || !strings.Contains(body, `<table class="ratekeys">`) ||
		!strings.Contains(body, "name:call_api") || !strings.Contains(body, "<code>customer-42</code> 10, <code>customer-7</code> 3, <code>(no key)</code> 1") ||
		strings.Contains(body, "customer-old") || !strings.Contains(body, `<td class="n">14</td>`) {
		t.Fatalf("per-key limits: %d\n%s", code, body)
	}
}
