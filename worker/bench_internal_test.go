package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/skiplock/skiplock/db"
)

// BenchmarkTaskPath is the worker's own per-task path, without a database:
// a claimed row made an execution (its Task, scope, and context with
// TaskTimeout's deadline), its no-op handler run, its outcome settled and
// handed to the completer, which writes nothing here. Its allocs/op and
// B/op are per task, whatever the machine's load:
//
//	go test -run '^$' -bench TaskPath ./worker/
func BenchmarkTaskPath(b *testing.B) {
	w := New(nil, Config{Logger: slog.New(slog.DiscardHandler)})
	w.comp = newCompleter(nil, nil, nil, nil, w.log, 1)
	handlers := Handlers{"noop": func(context.Context, *Task) error { return nil }}
	now := time.Now()
	row := db.TaskClaimRow{ID: 1, Queue: "default", Name: "noop", Payload: json.RawMessage(`{"n":1}`),
		Attempt: 1, MaxAttempts: 25, RunAt: now, CreatedAt: now, StartedAt: &now}
	b.ReportAllocs()
	for b.Loop() {
		e := w.newExecution(row, 1, nil)
		w.settled.Add(1)
		w.mu.Lock()
		w.inflight[e] = struct{}{}
		w.mu.Unlock()
		w.execute(e, handlers)
		// The outcomes a write would take away.
		w.comp.mu.Lock()
		if len(w.comp.pending) == pendingCap {
			clear(w.comp.pending)
			w.comp.pending = w.comp.pending[:0]
		}
		w.comp.mu.Unlock()
	}
	if len(w.inflight) != 0 {
		b.Fatalf("%d executions left in flight", len(w.inflight))
	}
}
