package observe

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// DefaultDurationBuckets are the buckets, in seconds, of the handler
// duration histogram: 5ms to 10 minutes.
var DefaultDurationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// ClaimBatchBuckets are the buckets of the claim batch size histogram. A
// claim takes at most 1000 tasks (worker.Config.ClaimBatch's bound); 0 is a
// claim that found nothing.
var ClaimBatchBuckets = []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}

// MetricsOptions tunes NewMetrics.
type MetricsOptions struct {
	// DurationBuckets are the handler duration histogram's buckets, in
	// seconds. Defaults to DefaultDurationBuckets.
	DurationBuckets []float64
}

// Metrics counts what producers and workers do, for Prometheus. It is at
// once a prometheus.Collector (register it), a worker.Observer (set it as
// worker.Config.Observer), a worker.Middleware source (add
// m.Middleware() to worker.Config.Middleware) and a queue.EnqueueHook
// (queue.WithEnqueueHooks(m)). Every part is optional.
//
// Labels are queue, name and outcome only, so the number of series is
// bounded by the task names and queues the application uses.
type Metrics struct {
	enqueued   *prometheus.CounterVec
	started    *prometheus.CounterVec
	running    *prometheus.GaugeVec
	attempts   *prometheus.CounterVec
	completed  *prometheus.CounterVec
	failed     *prometheus.CounterVec
	retried    *prometheus.CounterVec
	cancelled  *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	claimBatch *prometheus.HistogramVec
	rescued    *prometheus.CounterVec
	lockLost   prometheus.Counter
	lockCut    prometheus.Counter
	reconnects prometheus.Counter
}

var (
	_ worker.Observer      = (*Metrics)(nil)
	_ queue.EnqueueHook    = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// NewMetrics returns Metrics with every count at zero.
func NewMetrics(opts MetricsOptions) *Metrics {
	buckets := opts.DurationBuckets
	if len(buckets) == 0 {
		buckets = DefaultDurationBuckets
	}
	qn := []string{"queue", "name"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "skiplock", Name: name, Help: help}, labels)
	}
	return &Metrics{
		enqueued:  counter("tasks_enqueued_total", "Tasks inserted by producers of this process (before their transaction commits).", qn...),
		started:   counter("tasks_started_total", "Handler calls started by this process.", qn...),
		attempts:  counter("task_attempts_total", "Attempts finished by this process, by outcome (success, error, panic, timeout, abandoned, no_handler, shutdown, lock_lost, cancelled, snoozed).", "queue", "name", "outcome"),
		completed: counter("tasks_completed_total", "Tasks completed by this process.", qn...),
		failed:    counter("tasks_failed_total", "Tasks that failed for good in this process: out of attempts, or failed permanently.", qn...),
		retried:   counter("tasks_retried_total", "Failed attempts that this process sent back to pending for a retry.", qn...),
		cancelled: counter("tasks_cancelled_total", "Running tasks cancelled on request in this process.", qn...),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "skiplock", Name: "tasks_running", Help: "Handlers running now in this process.",
		}, qn),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "skiplock", Name: "task_duration_seconds", Buckets: buckets,
			Help: "How long each attempt ran in this process, from its claim to its outcome.",
		}, qn),
		claimBatch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "skiplock", Name: "claim_batch_size", Buckets: ClaimBatchBuckets,
			Help: "Tasks each claim of this process took; 0 for a claim that found nothing due.",
		}, []string{"queue"}),
		rescued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "skiplock", Name: "tasks_rescued_total",
			Help: "Tasks this process, as the elected rescuer, returned to the queue or failed because their worker was gone.",
		}, qn),
		lockLost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "skiplock", Name: "lock_session_losses_total",
			Help: "Times this process lost the database session holding its task locks.",
		}),
		lockCut: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "skiplock", Name: "lock_session_cancelled_tasks_total",
			Help: "Running handlers cancelled because this process lost its lock session.",
		}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "skiplock", Name: "lock_session_reconnects_total",
			Help: "Times this process opened a new lock session after losing one.",
		}),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.enqueued, m.started, m.running, m.attempts, m.completed, m.failed, m.retried, m.cancelled,
		m.duration, m.claimBatch, m.rescued, m.lockLost, m.lockCut, m.reconnects,
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// Middleware counts handler calls as they start and the handlers running
// now. The rest comes through the Observer methods.
func (m *Metrics) Middleware() worker.Middleware {
	return func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, t *worker.Task) error {
			m.started.WithLabelValues(t.Queue, t.Name).Inc()
			g := m.running.WithLabelValues(t.Queue, t.Name)
			g.Inc()
			defer g.Dec()
			return next(ctx, t)
		}
	}
}

// Claimed implements worker.Observer.
func (m *Metrics) Claimed(queueName string, _, got int) {
	m.claimBatch.WithLabelValues(queueName).Observe(float64(got))
}

// Finished implements worker.Observer.
func (m *Metrics) Finished(t *worker.Task, outcome worker.Outcome, next queue.Status, ran time.Duration) {
	m.attempts.WithLabelValues(t.Queue, t.Name, outcomeLabel(outcome)).Inc()
	m.duration.WithLabelValues(t.Queue, t.Name).Observe(ran.Seconds())
	switch next {
	case queue.StatusCompleted:
		m.completed.WithLabelValues(t.Queue, t.Name).Inc()
	case queue.StatusFailed:
		m.failed.WithLabelValues(t.Queue, t.Name).Inc()
	case queue.StatusCancelled:
		m.cancelled.WithLabelValues(t.Queue, t.Name).Inc()
	case queue.StatusPending, queue.StatusRetrying, queue.StatusScheduled:
		if failed(outcome) {
			m.retried.WithLabelValues(t.Queue, t.Name).Inc()
		}
	}
}

// Rescued implements worker.Observer.
func (m *Metrics) Rescued(queueName, name string) { m.rescued.WithLabelValues(queueName, name).Inc() }

// LockSessionLost implements worker.Observer.
func (m *Metrics) LockSessionLost(running int) {
	m.lockLost.Inc()
	m.lockCut.Add(float64(running))
}

// LockSessionReconnected implements worker.Observer.
func (m *Metrics) LockSessionReconnected() { m.reconnects.Inc() }

// BeforeEnqueue implements queue.EnqueueHook; it does nothing.
func (m *Metrics) BeforeEnqueue(context.Context, []*queue.EnqueuedTask) {}

// AfterEnqueue implements queue.EnqueueHook: it counts inserted tasks.
func (m *Metrics) AfterEnqueue(_ context.Context, tasks []*queue.EnqueuedTask) {
	for _, t := range tasks {
		m.enqueued.WithLabelValues(t.Queue, t.Name).Inc()
	}
}

// Handler serves the metrics that g gathers in Prometheus' exposition
// format; mount it at /metrics. A collector that fails (the database is
// down for QueueCollector) is reported in its own metrics, and the others
// are still served.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
