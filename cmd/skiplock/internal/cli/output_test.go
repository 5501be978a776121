package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/queue"
)

// show prints what a handler recorded with worker.SetOutput, in both forms.
func TestShowOutput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.insert(t, "images", "resize", queue.StatusCompleted, 1, 3, "")
	if _, err := b.pool.Exec(context.Background(), `UPDATE skiplock_tasks SET output = '{"url": "s3://thumbs/1.png", "width": 128}' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	none := b.insert(t, "images", "resize", queue.StatusCompleted, 1, 3, "")

	human := b.run(t, "show", fmt.Sprint(id)).ok(t).stdout
	if !strings.Contains(human, "  Output:    {\n               \"url\": \"s3://thumbs/1.png\",") {
		t.Fatalf("show lacks the output:\n%s", human)
	}
	if human := b.run(t, "show", fmt.Sprint(none)).ok(t).stdout; strings.Contains(human, "Output:") {
		t.Fatalf("show prints an output for a task without one:\n%s", human)
	}
	var shown struct {
		Output map[string]any `json:"output"`
	}
	b.run(t, "show", fmt.Sprint(id), "--json").ok(t).decode(t, &shown)
	if shown.Output["url"] != "s3://thumbs/1.png" {
		t.Fatalf("show --json output = %v", shown.Output)
	}
	if out := b.run(t, "show", fmt.Sprint(none), "--json").ok(t).stdout; strings.Contains(out, `"output"`) {
		t.Fatalf("show --json has an output for a task without one: %s", out)
	}
}

// show prints a task's progress and checkpoint (worker.SetProgress,
// worker.SaveCheckpoint), in both forms.
func TestShowProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.insert(t, "imports", "import", queue.StatusRunning, 2, 3, "")
	if _, err := b.pool.Exec(context.Background(), `UPDATE skiplock_tasks SET progress = '{"done": 40, "total": 100}', checkpoint = '{"page": 7}' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	none := b.insert(t, "imports", "import", queue.StatusCompleted, 1, 3, "")

	human := b.run(t, "show", fmt.Sprint(id)).ok(t).stdout
	if !strings.Contains(human, "  Progress:  {\n               \"done\": 40,") ||
		!strings.Contains(human, "  Checkpoint: {\n                \"page\": 7\n") {
		t.Fatalf("show lacks the progress or checkpoint:\n%s", human)
	}
	if human := b.run(t, "show", fmt.Sprint(none)).ok(t).stdout; strings.Contains(human, "Progress:") || strings.Contains(human, "Checkpoint:") {
		t.Fatalf("show prints a progress or checkpoint for a task without one:\n%s", human)
	}
	var shown struct {
		Progress   map[string]int `json:"progress"`
		Checkpoint map[string]int `json:"checkpoint"`
	}
	b.run(t, "show", fmt.Sprint(id), "--json").ok(t).decode(t, &shown)
	if shown.Progress["done"] != 40 || shown.Checkpoint["page"] != 7 {
		t.Fatalf("show --json progress = %v, checkpoint = %v", shown.Progress, shown.Checkpoint)
	}
	if out := b.run(t, "show", fmt.Sprint(none), "--json").ok(t).stdout; strings.Contains(out, `"progress"`) || strings.Contains(out, `"checkpoint"`) {
		t.Fatalf("show --json has a progress or checkpoint for a task without one: %s", out)
	}
}
