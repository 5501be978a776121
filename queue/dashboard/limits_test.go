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
