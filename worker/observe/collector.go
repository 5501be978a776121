package observe

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

// Defaults of QueueCollectorOptions.
const (
	DefaultCacheFor     = 2 * time.Second
	DefaultQueryTimeout = 5 * time.Second
)

// QueueCollectorOptions tunes NewQueueCollector.
type QueueCollectorOptions struct {
	// CacheFor is how long one reading of the database serves scrapes, so
	// that many scrapers (or a tight scrape interval) cannot hammer it.
	// Defaults to DefaultCacheFor (2s).
	CacheFor time.Duration
	// Timeout bounds each reading. Defaults to DefaultQueryTimeout (5s).
	Timeout time.Duration
	// Logger receives the errors of failed readings. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// QueueCollector is a prometheus.Collector of the state of every queue,
// read from the database when scraped: pending, due, running and failed
// tasks, the age of the oldest due task, and whether the queue is paused.
// Register it in one process (or a few), not in every worker: the numbers
// are the database's, the same everywhere.
//
// A reading is the dashboard's view of the queues: it costs what the backlog
// holds (pending, running and failed rows, through their partial indexes)
// and a probe per queue of the finished index, not the table's history.
// Queues with a backlog (pending, running or failed tasks) or paused are
// reported. When a reading fails, skiplock_queue_up is 0 and the per-queue
// series are left out rather than served stale.
type QueueCollector struct {
	client *queue.Client
	opts   QueueCollectorOptions

	mu   sync.Mutex // held through a reading, so concurrent scrapes share it
	at   time.Time
	rows []ops.QueueInfo
	err  error
}

var (
	descPending = prometheus.NewDesc("skiplock_queue_pending_tasks", "Pending tasks, due or scheduled for later.", []string{"queue"}, nil)
	descDue     = prometheus.NewDesc("skiplock_queue_due_tasks", "Pending tasks whose run time has come: the backlog.", []string{"queue"}, nil)
	descOldest  = prometheus.NewDesc("skiplock_queue_oldest_due_age_seconds", "How long the oldest due pending task has waited past its run time; 0 when none is due.", []string{"queue"}, nil)
	descRunning = prometheus.NewDesc("skiplock_queue_running_tasks", "Tasks running now, on any worker.", []string{"queue"}, nil)
	descFailed  = prometheus.NewDesc("skiplock_queue_failed_tasks", "Tasks that failed for good and wait to be requeued or purged.", []string{"queue"}, nil)
	descPaused  = prometheus.NewDesc("skiplock_queue_paused", "1 when the queue is paused.", []string{"queue"}, nil)
	descUp      = prometheus.NewDesc("skiplock_queue_up", "1 when the last reading of the queues from the database succeeded.", nil, nil)
)

// NewQueueCollector returns a collector that reads the queues through
// client's pool.
func NewQueueCollector(client *queue.Client, opts QueueCollectorOptions) *QueueCollector {
	if opts.CacheFor == 0 {
		opts.CacheFor = DefaultCacheFor
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultQueryTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &QueueCollector{client: client, opts: opts}
}

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPending, descDue, descOldest, descRunning, descFailed, descPaused, descUp} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	rows, err := c.read()
	up := 1.0
	if err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
	if err != nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, q string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, q)
	}
	for _, r := range rows {
		if r.Pending+r.Running+r.Failed == 0 && r.PausedAt == nil {
			continue // known, but nothing to report
		}
		gauge(descPending, float64(r.Pending), r.Name)
		gauge(descDue, float64(r.Due), r.Name)
		gauge(descOldest, r.OldestDue.Seconds(), r.Name)
		gauge(descRunning, float64(r.Running), r.Name)
		gauge(descFailed, float64(r.Failed), r.Name)
		paused := 0.0
		if r.PausedAt != nil {
			paused = 1
		}
		gauge(descPaused, paused, r.Name)
	}
}

// read returns the cached reading, or reads anew once it is CacheFor old.
func (c *QueueCollector) read() ([]ops.QueueInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.opts.CacheFor {
		return c.rows, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	c.rows, c.err = ops.Queues(ctx, c.client)
	if c.err != nil {
		c.opts.Logger.Warn("skiplock: reading queue depth for metrics", "error", c.err)
	}
	c.at = time.Now()
	return c.rows, c.err
}
