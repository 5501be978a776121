package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// Benchmarks of the hot path. They measure, never assert a time:
//
//	go test -run '^$' -bench . -benchmem ./worker/
//
// BenchmarkWorkNoop's op is one task: allocs/op is what the whole process
// allocates per task worked (worker, pgx, the runtime), so it shows the
// per-task allocation cost of the claim -> run -> finish -> unlock cycle.

type benchPayload struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	N       int    `json:"n"`
}

// benchBacklog returns a pool on a fresh schema holding n pending no-op
// tasks, enqueued in batches.
func benchBacklog(b *testing.B, n int) *pgxpool.Pool {
	b.Helper()
	pool := pgtest.Pool(b)
	client := queue.New(pool)
	ctx := context.Background()
	const batch = 5000
	tasks := make([]queue.NewTask, 0, batch)
	for done := 0; done < n; done += len(tasks) {
		tasks = tasks[:0]
		for i := done; i < min(n, done+batch); i++ {
			tasks = append(tasks, queue.NewTask{Name: "noop", Payload: benchPayload{N: i}})
		}
		if _, err := client.EnqueueMany(ctx, tasks); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) skiplock_tasks"); err != nil {
		b.Fatal(err)
	}
	return pool
}

// workBacklog runs a worker with cfg on a backlog of b.N no-op tasks and
// times it until every outcome is committed.
func workBacklog(b *testing.B, cfg worker.Config) {
	pool := benchBacklog(b, b.N)
	var done atomic.Int64
	allRan := make(chan struct{})
	handlers := worker.Handlers{"noop": func(context.Context, *worker.Task) error {
		if done.Add(1) == int64(b.N) {
			close(allRan)
		}
		return nil
	}}
	cfg.Logger = slog.New(slog.DiscardHandler)
	w := worker.New(pool, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go func() { result <- w.Run(ctx, handlers) }()
	<-allRan
	// Then until every outcome is committed: a 1 ms poll, so that the
	// figure is off by no more than that (pgtest.Eventually's 10 ms would
	// blur a short run).
	for {
		var busy bool
		err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM skiplock_tasks WHERE status = 'running')
			OR EXISTS (SELECT 1 FROM skiplock_tasks WHERE status = 'pending')`).Scan(&busy)
		if err != nil {
			b.Fatal(err)
		}
		if !busy {
			break
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	if err := <-result; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
}

// BenchmarkWorkNoop works a backlog with default settings.
func BenchmarkWorkNoop(b *testing.B) {
	workBacklog(b, worker.Config{})
}

// BenchmarkWorkNoopConcurrency shows how the claim batch, which is bounded
// by Concurrency, moves throughput.
func BenchmarkWorkNoopConcurrency(b *testing.B) {
	for _, c := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("concurrency=%d", c), func(b *testing.B) {
			workBacklog(b, worker.Config{Concurrency: c})
		})
	}
}

// BenchmarkTaskDecode is what a handler pays to read its payload.
func BenchmarkTaskDecode(b *testing.B) {
	raw, err := json.Marshal(benchPayload{To: "someone@example.com", Subject: "Welcome", N: 42})
	if err != nil {
		b.Fatal(err)
	}
	t := &worker.Task{ID: 1, Name: "email", Payload: raw}
	b.ReportAllocs()
	for b.Loop() {
		var p benchPayload
		if err := t.Decode(&p); err != nil {
			b.Fatal(err)
		}
	}
}
