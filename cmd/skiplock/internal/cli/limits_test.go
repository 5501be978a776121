package cli_test

import (
	"context"
	"strings"
	"testing"
)

// TestLimitCommands: set, list (and stats), change, remove, and bad input
// with one clear line and a non-zero exit.
func TestLimitCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, "limit", "set", "--queue", "reports", "--max", "2").ok(t)
	r := b.run(t, "limit", "set", "--key", "tenant:*", "--max", "5").ok(t)
	if !strings.Contains(r.stdout, "Limit key tenant:*: at most 5 running.") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	b.run(t, "limit", "set", "--queue", "reports", "--max", "3").ok(t)
	var out struct {
		Limits []struct {
			Kind   string `json:"kind"`
			Target string `json:"target"`
			Max    int    `json:"max"`
		} `json:"limits"`
	}
	b.run(t, "limit", "list", "--json").ok(t).decode(t, &out)
	if len(out.Limits) != 2 || out.Limits[0].Kind != "key" || out.Limits[1].Target != "reports" || out.Limits[1].Max != 3 {
		t.Fatalf("limit list = %+v", out)
	}
	b.insert(t, "reports", "r", "pending", 0, 3, "")
	if r := b.run(t, "stats").ok(t); !strings.Contains(r.stdout, "queue reports") || !strings.Contains(r.stdout, "Concurrency limits") {
		t.Fatalf("stats:\n%s", r.stdout)
	}
	b.run(t, "limit", "remove", "--queue", "reports").ok(t)
	b.run(t, "limit", "list", "--json").ok(t).decode(t, &out)
	if len(out.Limits) != 1 {
		t.Fatalf("after rm: %+v", out)
	}
	for _, args := range [][]string{
		{"limit", "set", "--queue", "q"},
		{"limit", "set", "--queue", "q", "--name", "n", "--max", "1"},
		{"limit", "remove", "--queue", "never-set"},
	} {
		if r := b.run(t, args...); r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

// TestLimitListRateKeys: limit list shows, after the concurrency limits,
// each per-key rate limit with a window open and its busiest keys, in the
// table and in --json.
func TestLimitListRateKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if r := b.run(t, "limit", "list").ok(t); strings.Contains(r.stdout, "Per-key") {
		t.Fatalf("no per-key windows, yet:\n%s", r.stdout)
	}
	// What workers write when they claim tasks of a per-key limited name.
	if _, err := b.pool.Exec(context.Background(), `
		INSERT INTO skiplock_rate_keys (scope, key, window_start, window_end, used) VALUES
			('name:call_api', 'customer-42', now(), now() + interval '1 hour', 10),
			('name:call_api', '', now(), now() + interval '1 hour', 2),
			('name:call_api', 'customer-old', now() - interval '2 hours', now() - interval '1 hour', 9)`); err != nil {
		t.Fatal(err)
	}
	r := b.run(t, "limit", "list").ok(t)
	if !strings.Contains(r.stdout, "Per-key rate limits") || !strings.Contains(r.stdout, "customer-42=10 (no key)=2") ||
		strings.Contains(r.stdout, "customer-old") {
		t.Fatalf("limit list:\n%s", r.stdout)
	}
	var out struct {
		RateKeys []struct {
			Limit   string `json:"limit"`
			Keys    int    `json:"keys"`
			Used    int    `json:"used"`
			Busiest []struct {
				Key  string `json:"key"`
				Used int    `json:"used"`
			} `json:"busiest"`
		} `json:"rate_keys"`
	}
	b.run(t, "limit", "list", "--json").ok(t).decode(t, &out)
	if len(out.RateKeys) != 1 || out.RateKeys[0].Limit != "name:call_api" || out.RateKeys[0].Keys != 2 || out.RateKeys[0].Used != 12 ||
		len(out.RateKeys[0].Busiest) != 2 || out.RateKeys[0].Busiest[0].Key != "customer-42" {
		t.Fatalf("limit list --json = %+v", out)
	}
}
