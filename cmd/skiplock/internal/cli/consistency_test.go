package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
	"github.com/skiplock/skiplock/queue"
)

// Every flag that takes a duration reads one syntax: Go's units, days and
// weeks.
func TestDurationFlagsOneSyntax(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var got taskOut
	b.run(t, "enqueue", "later", "--delay", "1d", "--timeout", "1w", "--json").ok(t).decode(t, &got)
	if until := time.Until(got.RunAt); until < 23*time.Hour || until > 25*time.Hour {
		t.Errorf("enqueue --delay 1d: runs in %v, want about 24h", until)
	}
	if got.TimeoutMS != (7 * 24 * time.Hour).Milliseconds() {
		t.Errorf("enqueue --timeout 1w: timeout %d ms", got.TimeoutMS)
	}
	b.run(t, "enqueue", "later", "--delay", "1d12h", "--json").ok(t).decode(t, &got)
	if until := time.Until(got.RunAt); until < 35*time.Hour || until > 37*time.Hour {
		t.Errorf("enqueue --delay 1d12h: runs in %v, want about 36h", until)
	}
	b.run(t, "schedules", "add", "daily", "--every", "1d", "--task", "x").ok(t)
	b.run(t, "purge", "--older-than", "2w", "--dry-run").ok(t)
	b.run(t, "list", "--since", "1w").ok(t)
	b.run(t, "audit", "--since", "1d").ok(t)

	for _, args := range [][]string{
		{"enqueue", "x", "--delay", "1y"},
		{"enqueue", "x", "--unique-key", "k", "--unique-window", "a day"},
		{"schedules", "add", "y", "--every", "1 d", "--task", "x"},
		{"purge", "--older-than", "1y", "--dry-run"},
	} {
		r := b.run(t, args...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "not a duration (want e.g. 90s, 15m, 36h, 7d, 2w or 1d12h)") ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line saying what a duration is", args, r.code, r.stderr)
		}
	}
	if r := b.run(t, "enqueue", "x", "--delay", "-5m"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "must not be negative") {
		t.Errorf("--delay -5m: exit %d, stderr %q; want exit 2, must not be negative", r.code, r.stderr)
	}
}

// Cancelling running tasks by ID is one operator change: one audit record,
// whatever mix of pending and running tasks it names.
func TestCancelRunningOneAuditRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	running := b.insert(t, "q", "a", queue.StatusRunning, 1, 3, "")
	b.run(t, "cancel", fmt.Sprint(running)).ok(t)
	records := b.auditRecords(t)
	if len(records) != 1 || records[0].action != "cancel" || records[0].affected != 1 {
		t.Fatalf("cancel of one running task recorded %+v, want one cancel record of 1 task", records)
	}

	pending := b.insert(t, "q", "a", queue.StatusPending, 0, 3, "")
	other := b.insert(t, "q", "a", queue.StatusRunning, 1, 3, "")
	r := b.run(t, "cancel", fmt.Sprint(pending), fmt.Sprint(other)).ok(t)
	if !strings.Contains(r.stdout, "Cancelled 1 task; cancellation requested for 1 running task.") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	records = b.auditRecords(t)
	if len(records) != 2 || records[1].action != "cancel" || records[1].affected != 2 {
		t.Fatalf("cancel of a pending and a running task recorded %+v, want a second record of 2 tasks", records)
	}
	if b.count(t, "id = $1 AND cancel_requested_at IS NOT NULL", other) != 1 || b.status(t, pending) != queue.StatusCancelled {
		t.Fatal("the running task has no request, or the pending one is not cancelled")
	}
}

// Cancelling pending and running tasks by filter is one operator change
// too: one audit record of both.
func TestCancelFilterRunningOneAuditRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pending := b.insert(t, "q", "a", queue.StatusPending, 0, 3, "")
	running := b.insert(t, "q", "a", queue.StatusRunning, 1, 3, "")
	b.insert(t, "other", "a", queue.StatusRunning, 1, 3, "")
	r := b.run(t, "cancel", "--status", "pending,running", "--queue", "q", "--yes").ok(t)
	records := b.auditRecords(t)
	if len(records) != 1 || records[0].action != "cancel" || records[0].affected != 2 {
		t.Fatalf("cancel by filter recorded %+v, want one cancel record of 2 tasks\n%s", records, r.stdout)
	}
	if b.count(t, "cancel_requested_at IS NOT NULL") != 1 || b.count(t, "id = $1 AND cancel_requested_at IS NOT NULL", running) != 1 ||
		b.status(t, pending) != queue.StatusCancelled {
		t.Fatal("the running task of queue q has no request (or another has one), or the pending one is not cancelled")
	}
}

type auditRecord struct {
	action   string
	affected int64
}

func (b *bundle) auditRecords(t *testing.T) []auditRecord {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT action, affected FROM skiplock_audit ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditRecord
	for rows.Next() {
		var r auditRecord
		if err := rows.Scan(&r.action, &r.affected); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A schedule that never ticked says so, even once a scheduler recorded the
// tick it starts after.
func TestScheduleListNeverTicked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, "schedules", "add", "hourly", "--every", "1h", "--task", "x").ok(t)
	lastTick := func() (string, bool) {
		t.Helper()
		cells := tableRow(t, b.run(t, "schedules", "list").ok(t).stdout, "hourly")
		var out struct {
			Schedules []map[string]any `json:"schedules"`
		}
		b.run(t, "schedules", "list", "--json").ok(t).decode(t, &out)
		_, inJSON := out.Schedules[0]["last_tick"]
		return cells["LAST TICK"], inJSON
	}
	if got, inJSON := lastTick(); got != "never" || inJSON {
		t.Errorf("before a scheduler saw it: LAST TICK %q, last_tick in --json %v; want never, absent", got, inJSON)
	}
	// What a scheduler records when it first sees the schedule: the tick
	// before, which it does not enqueue.
	exec := func(sql string) {
		t.Helper()
		if _, err := b.pool.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO skiplock_periodic (schedule, last_tick) VALUES ('hourly', date_trunc('hour', now()))`)
	if got, inJSON := lastTick(); got != "never" || inJSON {
		t.Errorf("after a scheduler saw it: LAST TICK %q, last_tick in --json %v; want never, absent", got, inJSON)
	}
	// A tick enqueued.
	exec(`UPDATE skiplock_periodic SET last_tick = date_trunc('hour', now()) + interval '1 hour' WHERE schedule = 'hourly'`)
	if got, inJSON := lastTick(); got == "never" || !strings.HasSuffix(got, ":00:00Z") || !inJSON {
		t.Errorf("after a tick: LAST TICK %q, last_tick in --json %v; want the tick's time", got, inJSON)
	}
}

// One verb per action: remove, never rm.
func TestRemoveIsTheVerb(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, "limit", "set", "--queue", "q", "--max", "2").ok(t)
	if r := b.run(t, "limit", "remove", "--queue", "q").ok(t); !strings.Contains(r.stdout, "Removed limit") {
		t.Errorf("limit remove: %q", r.stdout)
	}
	b.run(t, "schedules", "add", "s", "--every", "1m", "--task", "x").ok(t)
	for _, args := range [][]string{{"limit", "rm"}, {"schedules", "rm", "s"}} {
		if r := b.run(t, args...); r.code != cli.ExitUsage || !strings.Contains(r.stderr, `unknown command "rm"`) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2, unknown command", args, r.code, r.stderr)
		}
	}
	b.run(t, "schedules", "remove", "s").ok(t)
}

// audit --action's help names every action the trail records.
func TestAuditHelpListsEveryAction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	help := b.run(t, "audit", "--help").ok(t).stdout
	for _, a := range queue.AuditActions {
		if !strings.Contains(help, string(a)) {
			t.Errorf("audit --help lacks the action %q:\n%s", a, help)
		}
	}
}
