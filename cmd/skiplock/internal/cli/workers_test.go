package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/queue"
)

// TestWorkers: `skiplock workers` lists the registered workers, live ones
// first, says which are gone and counts the ones gone long ago.
func TestWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	if out := b.run(t, "workers").ok(t).stdout; !strings.Contains(out, "No workers are registered.") {
		t.Fatalf("workers on an idle schema:\n%s", out)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO skiplock_workers (id, host, pid, queues, names, lock_backend_pid, heartbeat_at) VALUES
		('w-live', 'box1', 11, '{mail}', '{mail.send}', NULL, now()),
		('w-stale', 'box2', 22, '{mail,reports}', NULL, NULL, now() - interval '5 minutes'),
		('w-old', 'box3', 33, '{mail}', NULL, NULL, now() - interval '2 hours')`); err != nil {
		t.Fatal(err)
	}
	id := b.insert(t, "mail", "mail.send", queue.StatusRunning, 1, 3, "")
	if _, err := b.pool.Exec(ctx, "UPDATE skiplock_tasks SET worker_id = 'w-live' WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}

	out := b.run(t, "workers").ok(t).stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") ||
		!strings.HasPrefix(lines[1], "w-live") || !strings.Contains(lines[1], "live") || !strings.Contains(lines[1], "mail.send") ||
		!strings.HasPrefix(lines[2], "w-stale") || !strings.Contains(lines[2], "gone") || !strings.Contains(lines[2], "(every name)") ||
		lines[3] != "(1 worker gone over 1h ago not listed)" {
		t.Fatalf("workers:\n%s", out)
	}

	var got struct {
		Workers []struct {
			ID      string   `json:"id"`
			Names   []string `json:"names"`
			Running int64    `json:"running"`
			Gone    bool     `json:"gone"`
		} `json:"workers"`
		Forgotten int `json:"forgotten"`
	}
	b.run(t, "workers", "--json").ok(t).decode(t, &got)
	if len(got.Workers) != 2 || got.Forgotten != 1 ||
		got.Workers[0].ID != "w-live" || got.Workers[0].Gone || got.Workers[0].Running != 1 || len(got.Workers[0].Names) != 1 ||
		got.Workers[1].ID != "w-stale" || !got.Workers[1].Gone || got.Workers[1].Names != nil {
		t.Fatalf("workers --json = %+v", got)
	}
}
