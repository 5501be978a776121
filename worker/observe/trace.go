package observe

import (
	"context"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TraceMetadataKey is the key of the task metadata entry that carries the
// enqueuing span's context: an object of W3C Trace Context headers, such
// as {"traceparent": "00-...-01"}.
const TraceMetadataKey = "trace"

// instrumentation names the tracer, as OpenTelemetry asks.
const instrumentation = "github.com/skiplock/skiplock/worker/observe"

// TraceOptions tunes Tracing and TraceEnqueue.
type TraceOptions struct {
	// TracerProvider makes the spans. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator writes and reads the trace context in task metadata.
	// Defaults to W3C Trace Context (propagation.TraceContext), whatever
	// the global propagator is, so that producers and workers agree.
	Propagator propagation.TextMapPropagator
	// Parent makes each attempt's span a child of the enqueuing span, in
	// its trace. By default an attempt starts a trace of its own with a
	// link to the enqueuing span: a task may run long after, and many
	// times.
	Parent bool
}

func (o TraceOptions) withDefaults() TraceOptions {
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = propagation.TraceContext{}
	}
	return o
}

// TraceEnqueue returns a queue.EnqueueHook that writes the span context of
// the enqueue call's ctx into each task's metadata under
// TraceMetadataKey, for Tracing to link to. A ctx without a span adds
// nothing. Use it with queue.New(pool, queue.WithEnqueueHooks(...)).
func TraceEnqueue(opts TraceOptions) queue.EnqueueHook {
	return traceHook{opts.withDefaults()}
}

type traceHook struct{ opts TraceOptions }

func (h traceHook) BeforeEnqueue(ctx context.Context, tasks []*queue.EnqueuedTask) {
	carrier := propagation.MapCarrier{}
	h.opts.Propagator.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return
	}
	raw, err := json.Marshal(carrier)
	if err != nil {
		return
	}
	for _, t := range tasks {
		t.Metadata[TraceMetadataKey] = raw
	}
}

func (traceHook) AfterEnqueue(context.Context, []*queue.EnqueuedTask) {}

// Tracing returns a Middleware that wraps each attempt in a span named
// after the task, of kind consumer, linked to (or, with Parent, child of)
// the span that enqueued it. The handler's ctx carries the span, so the
// handler's own spans nest under it. A failed attempt sets the span's
// status to error and records the error; a panic is recorded and goes on
// to the worker.
func Tracing(opts TraceOptions) worker.Middleware {
	opts = opts.withDefaults()
	tracer := opts.TracerProvider.Tracer(instrumentation)
	return func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, t *worker.Task) error {
			startOpts := []trace.SpanStartOption{
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					attribute.String("messaging.system", "skiplock"),
					attribute.String("messaging.operation.type", "process"),
					attribute.String("messaging.destination.name", t.Queue),
					attribute.String("messaging.message.id", fmt.Sprint(t.ID)),
					attribute.String("skiplock.task.name", t.Name),
					attribute.Int("skiplock.task.attempt", t.Attempt),
					attribute.Int("skiplock.task.max_attempts", t.MaxAttempts),
				),
			}
			if producer := extract(opts.Propagator, t.Metadata); producer.IsValid() {
				if opts.Parent {
					ctx = trace.ContextWithRemoteSpanContext(ctx, producer)
				} else {
					startOpts = append(startOpts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: producer}))
				}
			}
			ctx, span := tracer.Start(ctx, t.Name, startOpts...)
			defer span.End()
			return call(ctx, next, t, func(err error, panicked bool, value any) {
				outcome := outcomeOf(ctx, err, panicked)
				span.SetAttributes(attribute.String("skiplock.outcome", outcomeLabel(outcome)))
				switch {
				case panicked:
					span.AddEvent("panic", trace.WithAttributes(attribute.String("panic.value", fmt.Sprint(value))))
					span.SetStatus(codes.Error, fmt.Sprintf("panic: %v", value))
				case failed(outcome):
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
				}
			})
		}
	}
}

// extract reads the span context that TraceEnqueue wrote into metadata;
// it is invalid when there is none.
func extract(p propagation.TextMapPropagator, metadata json.RawMessage) trace.SpanContext {
	if len(metadata) == 0 {
		return trace.SpanContext{}
	}
	var md struct {
		Trace propagation.MapCarrier `json:"trace"`
	}
	if json.Unmarshal(metadata, &md) != nil || len(md.Trace) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(p.Extract(context.Background(), md.Trace))
}
