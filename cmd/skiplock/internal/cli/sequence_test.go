package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
	"github.com/skiplock/skiplock/queue"
)

func TestSequenceShow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var ids []int64
	for n := range 4 {
		id, err := b.client.Enqueue(ctx, "ledger.apply", n, queue.WithSequence("account:7"), queue.WithSequenceHold())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id.ID)
	}
	// The first completes, the second fails for good and holds the rest.
	for _, q := range []string{
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'completed', attempt = 1, finished_at = now() WHERE id = %d`, ids[0]),
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'failed', attempt = 1, finished_at = now(),
			errors = '[{"attempt": 1, "outcome": "error", "error": "ledger closed"}]' WHERE id = %d`, ids[1]),
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	human := b.run(t, "sequence", "show", "account:7").ok(t).stdout
	for _, want := range []string{
		`Sequence "account:7": 4 tasks: 2 waiting, 1 completed, 1 failed`,
		fmt.Sprintf("Held by task %d, failed: requeue it (skiplock requeue %d)", ids[1], ids[1]),
		"TASK",
	} {
		if !strings.Contains(human, want) {
			t.Errorf("sequence show lacks %q:\n%s", want, human)
		}
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(human, "\n") {
		rows[strings.Join(strings.Fields(line), " ")] = true
	}
	for _, want := range []string{
		fmt.Sprintf("%d ledger.apply default completed (hold) 1", ids[0]),
		fmt.Sprintf("> %d ledger.apply default failed (hold) 1", ids[1]),
		fmt.Sprintf("%d ledger.apply default waiting (hold) 0", ids[2]),
	} {
		found := false
		for r := range rows {
			if strings.HasPrefix(r, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("sequence show lacks a row starting %q:\n%s", want, human)
		}
	}
	if !strings.Contains(human, "ledger closed") || !strings.Contains(human, `waiting for its turn in sequence "account:7"`) {
		t.Errorf("sequence show does not say why:\n%s", human)
	}

	var out struct {
		Key    string           `json:"key"`
		Head   int64            `json:"head"`
		Counts map[string]int64 `json:"counts"`
		Tasks  []struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
			Head   bool   `json:"head"`
			Hold   bool   `json:"hold"`
		} `json:"tasks"`
	}
	b.run(t, "sequence", "show", "account:7", "--json").ok(t).decode(t, &out)
	if out.Key != "account:7" || out.Head != ids[1] || out.Counts["waiting"] != 2 || len(out.Tasks) != 4 ||
		!out.Tasks[1].Head || out.Tasks[1].Status != "failed" || !out.Tasks[3].Hold {
		t.Fatalf("sequence show --json = %+v", out)
	}

	// show of a task names its sequence; list filters by it.
	show := b.run(t, "show", fmt.Sprint(ids[2])).ok(t).stdout
	if !strings.Contains(strings.Join(strings.Fields(show), " "), "Sequence: account:7, held by this task if it fails for good (skiplock sequence show account:7)") ||
		!strings.Contains(show, `waiting: waiting for its turn in sequence "account:7"`) {
		t.Errorf("show of a sequenced task:\n%s", show)
	}
	var listed []struct {
		ID          int64  `json:"id"`
		SequenceKey string `json:"sequence_key"`
	}
	b.run(t, "list", "--sequence", "account:7", "--status", "waiting", "--json").ok(t).decode(t, &listed)
	if len(listed) != 2 || listed[0].ID != ids[3] || listed[0].SequenceKey != "account:7" {
		t.Errorf("list --sequence = %+v", listed)
	}

	// Requeued, the held task is the head again.
	b.run(t, "requeue", fmt.Sprint(ids[1])).ok(t)
	b.run(t, "sequence", "show", "account:7", "--json").ok(t).decode(t, &out)
	if out.Head != ids[1] || out.Tasks[1].Status != "pending" {
		t.Fatalf("after requeue: %+v", out)
	}

	if r := b.run(t, "sequence", "show", "nope"); r.code != cli.ExitError || !strings.Contains(r.stderr, `sequence not found: "nope"`) {
		t.Errorf("unknown sequence: exit %d, %q", r.code, r.stderr)
	}
	if r := b.run(t, "sequence", "show", ""); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "1 to 1024 bytes") {
		t.Errorf("empty key: exit %d, %q", r.code, r.stderr)
	}
	if r := b.run(t, "sequence", "show"); r.code != cli.ExitUsage {
		t.Errorf("no key: exit %d, %q", r.code, r.stderr)
	}
}

func TestEnqueueSequence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := strings.TrimSpace(b.run(t, "enqueue", "ledger.apply", "1", "--sequence", "account:9").ok(t).stdout)
	var task struct {
		ID           int64  `json:"id"`
		Status       string `json:"status"`
		SequenceKey  string `json:"sequence_key"`
		SequenceHold bool   `json:"sequence_hold"`
	}
	b.run(t, "enqueue", "ledger.apply", "2", "--sequence", "account:9", "--sequence-hold", "--json").ok(t).decode(t, &task)
	if first == "" || task.Status != "waiting" || task.SequenceKey != "account:9" || !task.SequenceHold {
		t.Fatalf("first %q, second %+v", first, task)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sequence-hold"}, "--sequence-hold needs --sequence"},
		{[]string{"--sequence", ""}, "invalid task: sequence key is empty"},
		{[]string{"--sequence", "k", "--unique-key", "u"}, "cannot be combined with a unique key"},
	} {
		r := b.run(t, append([]string{"enqueue", "t"}, c.args...)...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("enqueue %v: exit %d, %q", c.args, r.code, r.stderr)
		}
	}
}
