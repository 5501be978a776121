package observe_test

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
	"github.com/skiplock/skiplock/worker/observe"
)

func TestTracing(t *testing.T) {
	t.Parallel()
	for _, parent := range []bool{false, true} {
		name := "linked"
		if parent {
			name = "parent"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			opts := observe.TraceOptions{TracerProvider: tp, Parent: parent}
			client := queue.New(b.pool, queue.WithEnqueueHooks(observe.TraceEnqueue(opts)))

			pctx, producer := tp.Tracer("test").Start(ctx, "handle request")
			okID := enqueue(t, client, "ok")
			boomCtxID, err := client.Enqueue(pctx, "boom", nil, queue.WithMaxAttempts(1))
			if err != nil {
				t.Fatal(err)
			}
			okLinkedID, err := client.Enqueue(pctx, "ok", nil)
			if err != nil {
				t.Fatal(err)
			}
			producer.End()

			// The trace context travels in the task's metadata.
			task, err := client.Get(ctx, okLinkedID.ID)
			if err != nil {
				t.Fatal(err)
			}
			var md map[string]map[string]string
			if err := json.Unmarshal(task.Metadata, &md); err != nil || md[observe.TraceMetadataKey]["traceparent"] == "" {
				t.Fatalf("metadata = %s (%v), want a traceparent under %q", task.Metadata, err, observe.TraceMetadataKey)
			}

			stop := b.run(t, worker.Config{Middleware: []worker.Middleware{observe.Tracing(opts)}}, handlers())
			b.waitFinished(t)
			stop()

			byID := map[string]tracetest.SpanStub{}
			for _, s := range exp.GetSpans() {
				for _, a := range s.Attributes {
					if a.Key == "messaging.message.id" {
						byID[a.Value.AsString()] = s
					}
				}
			}
			want := producer.SpanContext()
			for _, id := range []int64{boomCtxID.ID, okLinkedID.ID} {
				s, ok := byID[itoa(id)]
				if !ok {
					t.Fatalf("no span for task %d among %d spans", id, len(exp.GetSpans()))
				}
				if s.SpanKind != trace.SpanKindConsumer {
					t.Errorf("task %d: span kind %v, want consumer", id, s.SpanKind)
				}
				if parent {
					if s.Parent.SpanID() != want.SpanID() || s.SpanContext.TraceID() != want.TraceID() {
						t.Errorf("task %d: parent %v, want the producer's span %v", id, s.Parent.SpanID(), want.SpanID())
					}
					continue
				}
				if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != want.SpanID() || s.Links[0].SpanContext.TraceID() != want.TraceID() {
					t.Errorf("task %d: links %+v, want one to the producer's span %v", id, s.Links, want.SpanID())
				}
				if s.SpanContext.TraceID() == want.TraceID() || s.Parent.IsValid() {
					t.Errorf("task %d: span is in the producer's trace; want a new root with a link", id)
				}
			}
			boom := byID[itoa(boomCtxID.ID)]
			if boom.Status.Code != codes.Error || boom.Status.Description != "boom" {
				t.Errorf("boom span status = %+v, want error \"boom\"", boom.Status)
			}
			if !hasAttr(boom.Attributes, attribute.String("skiplock.outcome", "error")) ||
				!hasAttr(boom.Attributes, attribute.String("skiplock.task.name", "boom")) ||
				!hasAttr(boom.Attributes, attribute.Int("skiplock.task.attempt", 1)) {
				t.Errorf("boom span attributes = %v", boom.Attributes)
			}
			plain, ok := byID[itoa(okID)]
			if !ok || len(plain.Links) != 0 || plain.Parent.IsValid() || plain.Status.Code == codes.Error {
				t.Errorf("a task enqueued without a span: got span %+v, want a root without links", plain)
			}
		})
	}
}

func hasAttr(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == want {
			return true
		}
	}
	return false
}
