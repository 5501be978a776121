package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/queue"
)

func TestWorkflowShow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	enq, err := b.client.EnqueueWorkflow(ctx, queue.Workflow{Name: "thumbnails", Steps: []queue.Step{
		{Name: "fetch"},
		{Name: "small", Task: "resize", DependsOn: []string{"fetch"}},
		{Name: "large", Task: "resize", DependsOn: []string{"fetch"}},
		{Name: "publish", DependsOn: []string{"small", "large"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// fetch completes (releasing small and large), then small fails for
	// good, which cancels publish.
	for _, q := range []string{
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'completed', attempt = 1, finished_at = now() WHERE id = %d`, enq.TaskIDs["fetch"]),
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'failed', attempt = 1, finished_at = now() WHERE id = %d`, enq.TaskIDs["small"]),
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	human := b.run(t, "workflow", "show", fmt.Sprint(enq.ID)).ok(t).stdout
	for _, want := range []string{
		fmt.Sprintf("Workflow %d thumbnails, created", enq.ID),
		"4 tasks: 1 pending, 1 completed, 1 failed, 1 cancelled",
		"LEVEL  STEP     TASK",
		fmt.Sprintf("publish cancelled: dependency %d (resize) failed for good", enq.TaskIDs["small"]),
	} {
		if !strings.Contains(human, want) {
			t.Errorf("workflow show lacks %q:\n%s", want, human)
		}
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(human, "\n") {
		rows[strings.Join(strings.Fields(line), " ")] = true
	}
	for _, want := range []string{
		fmt.Sprintf("0 fetch %d fetch completed -", enq.TaskIDs["fetch"]),
		fmt.Sprintf("1 small %d resize failed fetch", enq.TaskIDs["small"]),
		fmt.Sprintf("1 large %d resize pending fetch", enq.TaskIDs["large"]),
		fmt.Sprintf("2 publish %d publish cancelled small, large", enq.TaskIDs["publish"]),
	} {
		if !rows[want] {
			t.Errorf("workflow show lacks the row %q:\n%s", want, human)
		}
	}
	var out struct {
		ID    int64 `json:"id"`
		Tasks []struct {
			ID        int64   `json:"id"`
			Step      string  `json:"step"`
			Status    string  `json:"status"`
			Level     int     `json:"level"`
			DependsOn []int64 `json:"depends_on"`
		} `json:"tasks"`
	}
	b.run(t, "workflow", "show", fmt.Sprint(enq.ID), "--json").ok(t).decode(t, &out)
	if len(out.Tasks) != 4 || out.Tasks[3].Step != "publish" || out.Tasks[3].Level != 2 || len(out.Tasks[3].DependsOn) != 2 ||
		out.Tasks[1].Status != "failed" {
		t.Fatalf("workflow show --json = %+v", out)
	}

	// show of one task names its workflow and dependencies.
	show := b.run(t, "show", fmt.Sprint(enq.TaskIDs["large"])).ok(t).stdout
	if !strings.Contains(show, fmt.Sprintf("Workflow:    %d (skiplock workflow show %d)", enq.ID, enq.ID)) ||
		!strings.Contains(show, fmt.Sprintf("Depends on:  %d (0 not completed)", enq.TaskIDs["fetch"])) {
		t.Errorf("show of a workflow task:\n%s", show)
	}

	if r := b.run(t, "workflow", "show", "999999"); r.code == 0 || !strings.Contains(r.stderr, "workflow not found: 999999") {
		t.Errorf("unknown workflow: exit %d, %q", r.code, r.stderr)
	}
}
