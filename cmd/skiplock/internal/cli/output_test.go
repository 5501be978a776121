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
