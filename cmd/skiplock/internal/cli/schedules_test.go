package cli_test

import (
	"strings"
	"testing"
)

// TestScheduleCommands: add, list, set (only the flags given), pause,
// resume, remove; bad input with one clear line, exit 2 and nothing
// changed.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.run(t, "schedules", "add", "nightly", "--cron", "0 3 * * *", "--task", "report.build", "--queue", "reports", "--payload", `{"full":true}`).ok(t)
	if !strings.Contains(r.stdout, "Added schedule nightly: task report.build 0 3 * * *.") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	b.run(t, "schedules", "add", "ping", "--every", "30s", "--task", "ping", "--paused").ok(t)
	b.run(t, "schedules", "set", "ping", "--every", "1m").ok(t)
	var out struct {
		Schedules []struct {
			Name    string         `json:"name"`
			Cron    string         `json:"cron"`
			EveryMs int64          `json:"every_ms"`
			Task    string         `json:"task"`
			Queue   string         `json:"queue"`
			Payload map[string]any `json:"payload"`
			Paused  bool           `json:"paused"`
		} `json:"schedules"`
	}
	b.run(t, "schedules", "list", "--json").ok(t).decode(t, &out)
	if len(out.Schedules) != 2 {
		t.Fatalf("schedules list = %+v", out)
	}
	n, p := out.Schedules[0], out.Schedules[1]
	if n.Name != "nightly" || n.Cron != "0 3 * * *" || n.Queue != "reports" || n.Payload["full"] != true || n.Paused {
		t.Errorf("nightly = %+v", n)
	}
	if p.Name != "ping" || p.EveryMs != 60000 || p.Task != "ping" || !p.Paused {
		t.Errorf("ping after set --every 1m = %+v (the other fields kept)", p)
	}
	b.run(t, "schedules", "resume", "ping").ok(t)
	b.run(t, "schedules", "pause", "nightly").ok(t)
	r = b.run(t, "schedules", "list").ok(t)
	for _, want := range []string{"nightly", "0 3 * * *", "report.build", "reports", "paused", "ping", "every 1m0s", "active"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("schedules list lacks %q:\n%s", want, r.stdout)
		}
	}
	b.run(t, "schedules", "remove", "ping").ok(t)
	if r := b.run(t, "audit", "--action", "schedule-add").ok(t); !strings.Contains(r.stdout, "nightly") {
		t.Errorf("audit lacks the schedule-add of nightly:\n%s", r.stdout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"schedules", "add", "bad", "--cron", "61 * * * *", "--task", "x"}, `cron expression "61 * * * *" does not parse`},
		{[]string{"schedules", "add", "nightly", "--cron", "0 4 * * *", "--task", "x"}, "already exists"},
		{[]string{"schedules", "add", "x", "--task", "x"}, "give --cron or --every"},
		{[]string{"schedules", "add", "x", "--every", "1m"}, "give --task"},
		{[]string{"schedules", "add", "x", "--every", "1m", "--cron", "* * * * *", "--task", "x"}, "not both"},
		{[]string{"schedules", "add", "x", "--every", "100ms", "--task", "x"}, "at least 1s"},
		{[]string{"schedules", "add", "x", "--every", "1m", "--task", "x", "--payload", "{"}, "not valid JSON"},
		{[]string{"schedules", "set", "ghost", "--every", "1m"}, `schedule not found: "ghost"`},
		{[]string{"schedules", "remove", "ghost"}, "schedule not found"},
		{[]string{"schedules", "pause"}, "give the schedule's NAME"},
	} {
		r := b.run(t, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line saying %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	b.run(t, "schedules", "list", "--json").ok(t).decode(t, &out)
	if len(out.Schedules) != 1 || out.Schedules[0].Cron != "0 3 * * *" {
		t.Errorf("after bad input: %+v", out)
	}
}
