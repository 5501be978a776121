package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
)

// enqueue --replace-key replaces the task of the key that has not started,
// saying so on stderr; --debounce moves its run time; show prints the key;
// bad combinations are usage errors.
func TestEnqueueReplaceKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.run(t, "enqueue", "search.index", `{"rev":1}`, "--replace-key", "doc:42").ok(t)
	if strings.Contains(first.stderr, "replaced") {
		t.Fatalf("first call: %q", first.stderr)
	}
	var task struct {
		ID         int64     `json:"id"`
		Payload    any       `json:"payload"`
		ReplaceKey string    `json:"replace_key"`
		RunAt      time.Time `json:"run_at"`
	}
	second := b.run(t, "enqueue", "search.index", `{"rev":2}`, "--replace-key", "doc:42", "--debounce", "1h", "--json").ok(t)
	second.decode(t, &task)
	id := strings.TrimSpace(first.stdout)
	if !strings.Contains(second.stderr, "replaced pending task "+id+` of replace key "doc:42"`) ||
		task.ReplaceKey != "doc:42" || time.Until(task.RunAt) < 50*time.Minute {
		t.Fatalf("second call: %+v, %q (first %s)", task, second.stderr, id)
	}
	if out := b.run(t, "show", id).ok(t).stdout; !strings.Contains(out, "Replace key:") || !strings.Contains(out, `"rev": 2`) {
		t.Fatalf("show %s:\n%s", id, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--debounce", "5s"}, "--debounce needs --replace-key"},
		{[]string{"--replace-key", ""}, "WithReplaceKey: the key is empty"},
		{[]string{"--replace-key", "k", "--debounce", "-1s"}, "must not be negative"},
		{[]string{"--replace-key", "k", "--unique-key", "u"}, "cannot be combined with WithUniqueKey"},
	} {
		r := b.run(t, append([]string{"enqueue", "t"}, c.args...)...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("enqueue %v: exit %d, %q", c.args, r.code, r.stderr)
		}
	}
}
