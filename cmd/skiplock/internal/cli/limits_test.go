package cli_test

import (
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
	b.run(t, "limit", "rm", "--queue", "reports").ok(t)
	b.run(t, "limit", "list", "--json").ok(t).decode(t, &out)
	if len(out.Limits) != 1 {
		t.Fatalf("after rm: %+v", out)
	}
	for _, args := range [][]string{
		{"limit", "set", "--queue", "q"},
		{"limit", "set", "--queue", "q", "--name", "n", "--max", "1"},
		{"limit", "rm", "--queue", "never-set"},
	} {
		if r := b.run(t, args...); r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}
