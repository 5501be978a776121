package cli_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/user"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
	"github.com/skiplock/skiplock/queue"
)

func (b *bundle) audit(t *testing.T) []queue.AuditEntry {
	t.Helper()
	records, err := b.client.AuditLog(context.Background(), queue.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return records
}

func osUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Skipf("no OS user: %v", err)
	}
	return u.Username
}

// TestAuditRecordsTheCommand: the changes the command makes are recorded
// as the OS user's, source cli, with the database role; a dry run leaves no
// record.
func TestAuditRecordsTheCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.insert(t, "mail", "send", queue.StatusFailed, 1, 1, "smtp down")
	c := b.insert(t, "mail", "send", queue.StatusFailed, 1, 1, "smtp down")
	b.run(t, "requeue", fmt.Sprint(a), "--dry-run").ok(t)
	if records := b.audit(t); len(records) != 0 {
		t.Fatalf("a dry run recorded %+v", records)
	}
	b.run(t, "requeue", fmt.Sprint(a), fmt.Sprint(c)).ok(t)
	b.run(t, "queue", "pause", "mail").ok(t)
	b.run(t, "enqueue", "report.build", `{"month": 11}`).ok(t)
	records := b.audit(t)
	var role string
	if err := b.pool.QueryRow(context.Background(), "SELECT current_user").Scan(&role); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range records {
		if r.Actor != osUser(t) || r.Source != queue.SourceCLI || r.DBRole != role || r.FinishedAt == nil {
			t.Errorf("record %+v, want %s from cli as %s", r, osUser(t), role)
		}
		got = append(got, fmt.Sprintf("%s %d", r.Action, r.Affected))
	}
	if strings.Join(got, ", ") != "enqueue 1, pause 1, requeue 2" {
		t.Fatalf("records %q", got)
	}
	if !strings.Contains(string(records[2].Request), fmt.Sprintf(`"ids": [%d, %d]`, a, c)) {
		t.Errorf("the requeue's request: %s", records[2].Request)
	}
}

// TestAuditCommand lists the records newest first, as a table and as
// JSON, and filters them.
func TestAuditCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, "mail", "send", queue.StatusPending, 0, 3, "")
	ctx := context.Background()
	alice := queue.WithActor(ctx, queue.Actor{Name: "alice", Source: queue.SourceDashboard})
	if err := b.client.PauseQueue(alice, "mail"); err != nil {
		t.Fatal(err)
	}
	if err := b.client.ResumeQueue(alice, "mail"); err != nil {
		t.Fatal(err)
	}
	b.run(t, "queue", "pause", "mail").ok(t)
	if _, err := b.pool.Exec(ctx, `UPDATE skiplock_audit SET at = now() - interval '3 days' WHERE action = 'pause' AND actor = 'alice'`); err != nil {
		t.Fatal(err)
	}

	out := b.run(t, "audit").ok(t).stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "ACTOR") {
		t.Fatalf("audit printed:\n%s", out)
	}
	for i, want := range []*regexp.Regexp{
		regexp.MustCompile(`\s` + regexp.QuoteMeta(osUser(t)) + `\s+cli\s+\S+\s+pause\s+1\s+\{"queue":"mail"\}\s+-$`),
		regexp.MustCompile(`\salice\s+dashboard\s+\S+\s+resume\s+1\s`),
		regexp.MustCompile(`\salice\s+dashboard\s+\S+\s+pause\s+1\s`),
	} {
		if !want.MatchString(lines[i+1]) {
			t.Errorf("line %d %q does not match %s", i+1, lines[i+1], want)
		}
	}

	var records []struct {
		ID       int64
		Actor    string
		Source   string
		Action   string
		Affected int64
		Request  map[string]any
	}
	b.run(t, "audit", "--json", "--actor", "alice").ok(t).decode(t, &records)
	if len(records) != 2 || records[0].Action != "resume" || records[1].Action != "pause" || records[0].Request["queue"] != "mail" {
		t.Fatalf("--json --actor alice: %+v", records)
	}
	for args, want := range map[string]int{
		"--action pause":                          2,
		"--since 24h":                             2,
		"--since 24h --actor alice":               1,
		"--source dashboard":                      2,
		"--limit 1":                               1,
		fmt.Sprintf("--before %d", records[0].ID): 1,
	} {
		var got []map[string]any
		b.run(t, append([]string{"audit", "--json"}, strings.Fields(args)...)...).ok(t).decode(t, &got)
		if len(got) != want {
			t.Errorf("audit %s: %d records, want %d", args, len(got), want)
		}
	}
	for _, args := range [][]string{{"--action", "nap"}, {"--source", "cron"}, {"--since", "yesterday"}, {"--limit", "0"}} {
		if r := b.run(t, append([]string{"audit"}, args...)...); r.code != cli.ExitUsage {
			t.Errorf("audit %v: exit %d, want 2 (%s)", args, r.code, r.stderr)
		}
	}
	if out := b.run(t, "audit", "--actor", "nobody").ok(t).stdout; !strings.Contains(out, "No operator change recorded matches.") {
		t.Errorf("audit --actor nobody printed %q", out)
	}
}

// TestUIRecordsItsChanges: a change made through `skiplock ui` is recorded
// as the server's, source dashboard.
func TestUIRecordsItsChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, "mail", "send", queue.StatusPending, 0, 3, "")
	base := b.serveUI(t, nil, "--listen", "127.0.0.1:0", "--refresh", "0")
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the queues page:\n%s", page)
	}
	resp, err = c.PostForm(base+"queues/mail/pause", url.Values{"csrf": {string(m[1])}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("pause through skiplock ui: %s", resp.Status)
	}
	records := b.audit(t)
	if len(records) != 1 || records[0].Actor != "skiplock ui" || records[0].Source != queue.SourceDashboard || records[0].Action != queue.AuditPause {
		t.Fatalf("records %+v", records)
	}
}
