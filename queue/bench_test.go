package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// Benchmarks of enqueueing. They measure, never assert a time:
//
//	go test -run '^$' -bench . -benchmem ./queue/
//
// An op is one task, so ns/op and allocs/op compare across single and bulk
// enqueue.

type benchPayload struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	N       int    `json:"n"`
}

// BenchmarkEnqueue is one producer calling Enqueue: one statement and one
// commit per task, so ns/op is the latency of a call.
func BenchmarkEnqueue(b *testing.B) {
	client := queue.New(pgtest.Pool(b))
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := client.Enqueue(ctx, "email", benchPayload{To: "someone@example.com", N: i}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkEnqueueParallel is 16 producers calling Enqueue at once on a pool
// of 16 connections: the commits of concurrent producers share WAL flushes,
// so throughput grows with producers until the server's CPU or disk runs
// out.
func BenchmarkEnqueueParallel(b *testing.B) {
	const producers = 16
	cfg := pgtest.Config(b, pgtest.Schema(b, true))
	cfg.MaxConns = producers
	client := queue.New(pgtest.PoolFromConfig(b, cfg))
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(max(producers/runtime.GOMAXPROCS(0), 1))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.Enqueue(ctx, "email", benchPayload{To: "someone@example.com"}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkEnqueueMany enqueues in batches; an op is one task.
func BenchmarkEnqueueMany(b *testing.B) {
	for _, size := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			client := queue.New(pgtest.Pool(b))
			ctx := context.Background()
			batch := make([]queue.NewTask, size)
			for i := range batch {
				batch[i] = queue.NewTask{Name: "email", Payload: benchPayload{To: "someone@example.com", N: i}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += size {
				if _, err := client.EnqueueMany(ctx, batch[:min(size, b.N-done)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

// BenchmarkEnqueueManySequenced enqueues batches in which every task has a
// sequence key (one of keys): the INSERT path, which locks the batch's keys
// and checks them first, instead of COPY; an op is one task.
func BenchmarkEnqueueManySequenced(b *testing.B) {
	const size = 1000
	for _, keys := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d/keys=%d", size, keys), func(b *testing.B) {
			client := queue.New(pgtest.Pool(b))
			ctx := context.Background()
			batch := make([]queue.NewTask, size)
			for i := range batch {
				batch[i] = queue.NewTask{Name: "email", Payload: benchPayload{To: "someone@example.com", N: i},
					Options: []queue.Option{queue.WithSequence(fmt.Sprintf("account:%d", i%keys))}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += size {
				if _, err := client.EnqueueMany(ctx, batch[:min(size, b.N-done)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

// BenchmarkEncodePayload is the producer-side encoding of one payload
// (internal/schema.EncodePayload, which Enqueue calls).
func BenchmarkEncodePayload(b *testing.B) {
	raw, _ := json.Marshal(benchPayload{To: "someone@example.com", Subject: "Welcome", N: 42})
	for _, c := range []struct {
		name    string
		payload any
	}{
		{"struct", benchPayload{To: "someone@example.com", Subject: "Welcome", N: 42}},
		{"raw", json.RawMessage(raw)},
		{"nil", nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := schema.EncodePayload(c.payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
