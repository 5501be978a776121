package roles

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TestShardedRoles: a producer and a worker with only their grants read
// their shard's stamp (from the catalog), enqueue and run on it.
func TestShardedRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := migrations.SetShard(ctx, b.admin, 4); err != nil {
		t.Fatal(err)
	}
	_, producer := b.as(t, migrations.Producer)
	_, consumer := b.as(t, migrations.Worker)
	sc, err := queue.NewSharded(map[int]*pgxpool.Pool{4: producer})
	if err != nil {
		t.Fatal(err)
	}
	id, err := sc.Enqueue(ctx, "sharded", nil)
	if err != nil {
		t.Fatalf("Enqueue as a producer: %v", err)
	}
	if queue.ShardOf(id.ID) != 4 {
		t.Fatalf("task %d of shard %d, want 4", id.ID, queue.ShardOf(id.ID))
	}
	sw, err := worker.NewSharded(map[int]*pgxpool.Pool{4: consumer}, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- sw.Run(ctx, worker.Handlers{"sharded": func(context.Context, *worker.Task) error { return nil }})
	}()
	pgtest.Eventually(t, 5*time.Second, "the task to complete under the worker role", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run as a worker role returned: %v", err)
		default:
		}
		return b.count(t, "id = $1 AND status = 'completed'", id.ID) == 1
	})
	stopCtx, cancel := context.WithTimeout(ctx, pgtest.Patient(5*time.Second))
	defer cancel()
	if err := sw.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
