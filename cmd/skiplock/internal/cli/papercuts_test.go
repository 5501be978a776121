package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

// Cron and systemd run commands with stdin from /dev/null: a character
// device, but no terminal. A confirmation must take the non-interactive
// path (exit 2, "pass --yes") rather than prompt and read EOF.
func TestConfirmStdinDevNull(t *testing.T) { // not parallel: it swaps os.Stdin
	b := setup(t)
	id := b.insert(t, "mail", "send", queue.StatusFailed, 3, 3, "boom")
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	stdin := os.Stdin
	os.Stdin = devNull
	env := cli.OSEnv()
	os.Stdin = stdin
	env.Getenv = nil // the test's schema, not the process's DATABASE_URL
	if env.Interactive {
		t.Fatal("OSEnv takes stdin from /dev/null for a terminal")
	}
	r := b.runEnv(t, env, "requeue", "--failed")
	if r.code != cli.ExitError || !strings.Contains(r.oneLine(t), "pass --yes") || strings.Contains(r.stderr, "[y/N]") {
		t.Fatalf("requeue --failed </dev/null: exit %d, stderr %q; want exit 1 asking for --yes, no prompt", r.code, r.stderr)
	}
	if b.status(t, id) != queue.StatusFailed {
		t.Fatal("the task changed without confirmation")
	}
}

func TestPostgresURLExpected(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"mysql://root@127.0.0.1:3306/test", "redis://127.0.0.1:6379/0", "sqlite:///tmp/x.db"} {
		r := (*bundle)(nil).run(t, "stats", "--database-url", u)
		if r.code != cli.ExitUsage || !strings.Contains(r.oneLine(t), "a postgres:// URL is expected") {
			t.Errorf("%s: exit %d, stderr %q", u, r.code, r.stderr)
		}
	}
}

func TestQueuePauseUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, "reports", "r", queue.StatusCompleted, 1, 3, "")
	r := b.run(t, "queue", "pause", "reports", "nosuchqueue")
	if r.code != cli.ExitUsage || !strings.Contains(r.oneLine(t), `no queue "nosuchqueue"`) || !strings.Contains(r.stderr, "--create") {
		t.Fatalf("pause nosuchqueue: exit %d, stderr %q", r.code, r.stderr)
	}
	if paused := b.pausedNames(t); len(paused) != 0 {
		t.Fatalf("paused %v after a refused pause, want nothing (not even the known queue)", paused)
	}
	if r := b.run(t, "queue", "resume", "nosuchqueue"); r.code != cli.ExitUsage || !strings.Contains(r.oneLine(t), "nothing to resume") {
		t.Fatalf("resume nosuchqueue: exit %d, stderr %q", r.code, r.stderr)
	}
	if n := b.count(t, "true"); n != 1 {
		t.Fatalf("%d tasks", n)
	}
	// A queue known only by its finished tasks, and one created on purpose.
	b.run(t, "queue", "pause", "reports").ok(t)
	b.run(t, "queue", "pause", "later", "--create").ok(t)
	if paused := b.pausedNames(t); strings.Join(paused, ",") != "later,reports" {
		t.Fatalf("paused %v, want later and reports", paused)
	}
	// Paused queues show in queue list and stats, with a time zone.
	list := b.run(t, "queue", "list").ok(t).stdout
	if !regexp.MustCompile(`later .*paused since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Za-z0-9+-]+\n`).MatchString(list) {
		t.Fatalf("queue list does not show when later was paused, with its zone:\n%s", list)
	}
	var stats struct {
		Queues []struct {
			Queue    string  `json:"queue"`
			PausedAt *string `json:"paused_at"`
		} `json:"queues"`
	}
	b.run(t, "stats", "--json").ok(t).decode(t, &stats)
	if len(stats.Queues) != 2 || stats.Queues[0].Queue != "later" || stats.Queues[0].PausedAt == nil {
		t.Fatalf("stats = %+v, want the empty paused queue later listed", stats)
	}
	if human := b.run(t, "stats").ok(t).stdout; !regexp.MustCompile(`(?m)^later +paused `).MatchString(human) {
		t.Fatalf("stats table does not list later as paused:\n%s", human)
	}
}

func (b *bundle) pausedNames(t *testing.T) []string {
	t.Helper()
	ps, err := ops.PausedQueues(context.Background(), b.client)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

// Cancelling one running task says what happened once.
func TestCancelRunningSaysOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	running := b.insert(t, "q", "a", queue.StatusRunning, 1, 3, "")
	r := b.run(t, "cancel", fmt.Sprint(running)).ok(t)
	want := fmt.Sprintf("Task %d: cancellation requested (running; its worker stops the handler).\n", running)
	if r.stdout != want {
		t.Fatalf("cancel of a running task printed %q, want %q", r.stdout, want)
	}
	var out struct {
		Count     int64   `json:"count"`
		Requested []int64 `json:"requested"`
	}
	b.run(t, "cancel", fmt.Sprint(running), "--json").ok(t).decode(t, &out)
	if out.Count != 0 || len(out.Requested) != 1 || out.Requested[0] != running {
		t.Fatalf("--json = %+v", out)
	}
}

// Pending tasks are told apart by why they wait, failed ones by why they
// failed.
func TestListStates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := b.pool.Exec(context.Background(), sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	due := b.insert(t, "q", "due", queue.StatusPending, 0, 3, "")
	retrying := b.insert(t, "q", "retrying", queue.StatusPending, 1, 3, "")
	scheduled := b.insert(t, "q", "scheduled", queue.StatusPending, 0, 3, "")
	exec(`UPDATE skiplock_tasks SET run_at = now() + interval '1 hour' WHERE id = ANY($1)`, []int64{retrying, scheduled})
	exhausted := b.insert(t, "q", "exhausted", queue.StatusFailed, 3, 3, "boom")
	permanent := b.insert(t, "q", "permanent", queue.StatusFailed, 1, 3, "bad input")
	exec(`UPDATE skiplock_tasks SET errors = jsonb_set(errors, '{0,permanent}', 'true') WHERE id = $1`, permanent)

	var got []struct {
		ID        int64  `json:"id"`
		Status    string `json:"status"`
		Permanent bool   `json:"permanent"`
	}
	b.run(t, "list", "--json").ok(t).decode(t, &got)
	want := map[int64]string{due: "pending", retrying: "retrying", scheduled: "scheduled", exhausted: "failed", permanent: "failed"}
	for _, g := range got {
		if g.Status != want[g.ID] || g.Permanent != (g.ID == permanent) {
			t.Errorf("task %d: status %q permanent %v, want %q, permanent only for %d", g.ID, g.Status, g.Permanent, want[g.ID], permanent)
		}
	}
	table := b.run(t, "list").ok(t).stdout
	for _, w := range []string{"retrying", "scheduled", "failed (permanent)", "failed (out of attempts)", "due in "} {
		if !strings.Contains(table, w) {
			t.Errorf("list lacks %q:\n%s", w, table)
		}
	}
	b.run(t, "list", "--status", "retrying", "--json").ok(t).decode(t, &got)
	if len(got) != 1 || got[0].ID != retrying {
		t.Fatalf("--status retrying = %+v", got)
	}
	b.run(t, "list", "--status", "scheduled,failed", "--json").ok(t).decode(t, &got)
	if len(got) != 3 {
		t.Fatalf("--status scheduled,failed = %+v", got)
	}
	b.run(t, "list", "--status", "pending", "--json").ok(t).decode(t, &got)
	if len(got) != 1 || got[0].ID != due {
		t.Fatalf("--status pending = %+v, want the due task only", got)
	}
	b.run(t, "list", "--status", "scheduled,pending,retrying", "--json").ok(t).decode(t, &got)
	if len(got) != 3 {
		t.Fatalf("--status scheduled,pending,retrying lists %d tasks, want all 3 pending ones", len(got))
	}
	if r := b.run(t, "list", "--status", "sleeping"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "scheduled, pending, retrying") {
		t.Fatalf("--status sleeping: exit %d, %q", r.code, r.stderr)
	}
	show := b.run(t, "show", fmt.Sprint(retrying)).ok(t).stdout
	if !strings.Contains(show, "retrying: attempt 1 of 3 failed; retry in") {
		t.Errorf("show of a retrying task:\n%s", show)
	}
	show = b.run(t, "show", fmt.Sprint(permanent)).ok(t).stdout
	if !strings.Contains(show, "failed: permanent error on attempt 1 of 3, not retried") {
		t.Errorf("show of a permanently failed task:\n%s", show)
	}
	show = b.run(t, "show", fmt.Sprint(exhausted)).ok(t).stdout
	if !strings.Contains(show, "failed: out of attempts (3 of 3)") {
		t.Errorf("show of an exhausted task:\n%s", show)
	}

	// run-now makes the waiting ones due; a due one is fine as it is.
	r := b.run(t, "run-now", fmt.Sprint(retrying), fmt.Sprint(scheduled), fmt.Sprint(due)).ok(t)
	if !strings.Contains(r.stdout, "already due") {
		t.Errorf("run-now:\n%s", r.stdout)
	}
	if n := b.count(t, "status = 'pending' AND run_at <= now()"); n != 3 {
		t.Fatalf("%d due tasks after run-now, want 3", n)
	}
	if r := b.run(t, "run-now", fmt.Sprint(exhausted)); r.code != cli.ExitPartial || !strings.Contains(r.stdout, "failed, not waiting") {
		t.Fatalf("run-now of a failed task: exit %d\n%s", r.code, r.stdout)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failed := b.insert(t, "q", "a", queue.StatusFailed, 3, 3, "boom")
	pending := b.insert(t, "q", "a", queue.StatusPending, 0, 3, "")
	running := b.insert(t, "q", "a", queue.StatusRunning, 1, 3, "")
	if r := b.run(t, "delete", fmt.Sprint(failed)); r.code != cli.ExitError || !strings.Contains(r.stderr, "pass --yes") {
		t.Fatalf("delete without --yes and no terminal: exit %d %q", r.code, r.stderr)
	}
	r := b.run(t, "delete", fmt.Sprint(failed), fmt.Sprint(pending), fmt.Sprint(running), "999999", "--yes")
	if r.code != cli.ExitPartial || !strings.Contains(r.stdout, "running, not deleted (cancel it first)") || !strings.Contains(r.stdout, "not found") {
		t.Fatalf("delete: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := b.count(t, "true"); n != 1 || b.status(t, running) != queue.StatusRunning {
		t.Fatalf("%d tasks left, want only the running one", n)
	}
}

func TestEnqueueKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.run(t, "enqueue", "sync.account", `{"id":7}`, "--unique-key", "sync:7", "--exclusive-key", "account:7").ok(t)
	second := b.run(t, "enqueue", "sync.account", `{"id":7}`, "--unique-key", "sync:7").ok(t)
	if first.stdout != second.stdout || !strings.Contains(second.stderr, "not enqueued") || !strings.Contains(second.stderr, "sync:7") {
		t.Fatalf("second enqueue: stdout %q (first %q), stderr %q", second.stdout, first.stdout, second.stderr)
	}
	if n := b.count(t, "unique_key = 'sync:7' AND exclusive_key = 'account:7'"); n != 1 {
		t.Fatalf("%d tasks with the keys, want 1", n)
	}
	b.run(t, "enqueue", "digest", "--unique", "--unique-window", "24h").ok(t)
	if r := b.run(t, "enqueue", "digest", "--unique", "--unique-window", "24h"); !strings.Contains(r.stderr, "not enqueued") {
		t.Fatalf("second windowed enqueue: %q", r.stderr)
	}
	if n := b.count(t, "name = 'digest'"); n != 1 {
		t.Fatalf("%d digests, want 1", n)
	}
	for _, args := range [][]string{
		{"enqueue", "x", "--unique-window", "1h"},
		{"enqueue", "x", "--unique", "--unique-key", "k"},
		{"enqueue", "x", "--unique-key", "k", "--unique-window", "10ms"},
	} {
		if r := b.run(t, args...); r.code != cli.ExitUsage {
			t.Errorf("%v: exit %d, %q", args, r.code, r.stderr)
		}
	}
}

// A purge of recently finished tasks says that it lowers the rates.
func TestPurgeRecentWarns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, "q", "a", queue.StatusCompleted, 1, 3, "")
	var stderr bytes.Buffer
	r := b.run(t, "purge", "--older-than", "0s", "--yes").ok(t)
	stderr.WriteString(r.stderr)
	if !strings.Contains(stderr.String(), "will read low") || !strings.Contains(r.stdout, "Purged 1 task.") {
		t.Fatalf("purge --older-than 0s: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r := b.run(t, "purge", "--yes").ok(t); strings.Contains(r.stderr, "read low") {
		t.Fatalf("a week-old purge warns: %q", r.stderr)
	}
}
