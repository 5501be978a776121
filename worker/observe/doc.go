// Package observe makes skiplock's producers and workers visible: a
// logging middleware (log/slog), Prometheus metrics (counters, handler
// durations, claim sizes, queue depth read from the database) and
// OpenTelemetry tracing (a span per attempt, linked to the span that
// enqueued the task through W3C trace context in the task's metadata).
//
// Each part is optional. Wired together:
//
//	metrics := observe.NewMetrics(observe.MetricsOptions{})
//	tracing := observe.TraceOptions{} // the global TracerProvider
//
//	// Producers count what they enqueue and carry the caller's span.
//	client := queue.New(pool, queue.WithEnqueueHooks(metrics, observe.TraceEnqueue(tracing)))
//
//	// Workers: the first middleware is the outermost.
//	w := worker.New(pool, worker.Config{
//		Observer: metrics,
//		Middleware: []worker.Middleware{
//			observe.Tracing(tracing),
//			observe.Logging(logger, observe.LogOptions{}), // a line per attempt at debug
//			metrics.Middleware(),
//		},
//	})
//
//	// One process (not every worker) also reports the queues' depth.
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics, observe.NewQueueCollector(client, observe.QueueCollectorOptions{}))
//	http.Handle("/metrics", observe.Handler(reg))
//
// Labels are queue, name and outcome only, so the number of series stays
// bounded by the task names and queues an application uses.
package observe
