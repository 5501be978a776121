package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/queue"
)

func TestBatchListShow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	batch := queue.Batch{Name: "import", OnFinish: queue.NewTask{Name: "report"}, OnSuccess: queue.NewTask{Name: "announce"}}
	batch.Add("row", 1).Add("row", 2).Add("row", 3)
	enq, err := b.client.EnqueueBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.client.EnqueueBatch(ctx, queue.Batch{Tasks: []queue.NewTask{{Name: "solo"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Two members finish: one completes, one fails for good; the third is
	// cancelled, which finishes the batch.
	for _, q := range []string{
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'completed', attempt = 1, finished_at = now() WHERE id = %d`, enq.TaskIDs[0]),
		fmt.Sprintf(`UPDATE skiplock_tasks SET status = 'failed', attempt = 1, finished_at = now() WHERE id = %d`, enq.TaskIDs[1]),
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	b.run(t, "cancel", fmt.Sprint(enq.TaskIDs[2])).ok(t)

	list := b.run(t, "batch", "list").ok(t).stdout
	rows := map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		rows[strings.Join(strings.Fields(line), " ")] = true
	}
	for _, want := range []string{
		fmt.Sprintf("%d import finished 3 1 1 1 #%d #%d", enq.ID, enq.OnFinishTaskID, enq.OnSuccessTaskID),
		fmt.Sprintf("%d - running 1 0 0 0 - -", other.ID),
	} {
		found := false
		for r := range rows {
			if strings.HasPrefix(r, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("batch list lacks a row starting %q:\n%s", want, list)
		}
	}
	var running []struct {
		ID int64 `json:"id"`
	}
	b.run(t, "batches", "list", "--state", "running", "--json").ok(t).decode(t, &running)
	if len(running) != 1 || running[0].ID != other.ID {
		t.Errorf("batches list --state running --json = %+v, want batch %d", running, other.ID)
	}

	show := b.run(t, "batch", "show", fmt.Sprint(enq.ID)).ok(t).stdout
	flat := strings.Join(strings.Fields(show), " ")
	for _, want := range []string{
		fmt.Sprintf("Batch %d import, created", enq.ID),
		"3 members: 1 completed, 1 failed, 1 cancelled, 0 not finished",
		"Finished:",
		fmt.Sprintf("on_finish %d report default pending", enq.OnFinishTaskID),
		fmt.Sprintf("on_success %d announce default cancelled", enq.OnSuccessTaskID),
		fmt.Sprintf("batch %d finished with 1 completed, 1 failed and 1 cancelled of 3", enq.ID),
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("batch show lacks %q:\n%s", want, show)
		}
	}
	var out struct {
		State     string `json:"state"`
		Completed int    `json:"completed"`
		Tasks     []struct {
			Role   string `json:"role"`
			Status string `json:"status"`
		} `json:"tasks"`
	}
	b.run(t, "batch", "show", fmt.Sprint(enq.ID), "--json").ok(t).decode(t, &out)
	if out.State != "finished" || out.Completed != 1 || len(out.Tasks) != 5 || out.Tasks[3].Role != "on_finish" || out.Tasks[3].Status != "pending" {
		t.Errorf("batch show --json = %+v", out)
	}

	// show of one task names its batch.
	if s := b.run(t, "show", fmt.Sprint(enq.TaskIDs[0])).ok(t).stdout; !strings.Contains(strings.Join(strings.Fields(s), " "), fmt.Sprintf("Batch: %d (skiplock batch show %d)", enq.ID, enq.ID)) {
		t.Errorf("show of a batch member:\n%s", s)
	}
	if r := b.run(t, "batch", "show", "999999"); r.code == 0 || !strings.Contains(r.stderr, "batch not found: 999999") {
		t.Errorf("unknown batch: exit %d, %q", r.code, r.stderr)
	}
	if r := b.run(t, "batch", "list", "--state", "done"); r.code == 0 || !strings.Contains(r.stderr, `unknown batch state "done"`) {
		t.Errorf("unknown state: exit %d, %q", r.code, r.stderr)
	}
}
