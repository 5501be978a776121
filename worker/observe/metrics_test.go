package observe_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
	"github.com/skiplock/skiplock/worker/observe"
)

// scrape GETs /metrics from h and parses it as Prometheus would.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return families
}

// value finds the series of family name with the given labels (all of
// them) and returns its counter or gauge value, or its histogram's count.
func value(t *testing.T, families map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := families[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		if len(have) != len(labels)/2 {
			continue
		}
		for i := 0; i < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func TestMetricsScrape(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	m := observe.NewMetrics(observe.MetricsOptions{})
	client := queue.New(b.pool, queue.WithEnqueueHooks(m))
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, observe.NewQueueCollector(client, observe.QueueCollectorOptions{CacheFor: -1}))

	for range 3 {
		enqueue(t, client, "ok", queue.WithQueue("mail"))
	}
	enqueue(t, client, "boom", queue.WithQueue("mail"), queue.WithMaxAttempts(2))
	enqueue(t, client, "nap", queue.WithQueue("mail"))
	if _, err := client.EnqueueMany(ctx, []queue.NewTask{{Name: "ok"}, {Name: "ok"}}); err != nil {
		t.Fatal(err)
	}
	// A task for later stays pending: the queue collector sees it.
	enqueue(t, client, "later", queue.WithQueue("slow"), queue.WithDelay(3600e9))

	stop := b.run(t, worker.Config{
		Queues:     []string{"default", "mail"},
		Observer:   m,
		Middleware: []worker.Middleware{m.Middleware()},
	}, handlers())
	b.waitFinishedExcept(t, "slow")
	stop()

	f := scrape(t, observe.Handler(reg))
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"skiplock_tasks_enqueued_total", []string{"queue", "mail", "name", "ok"}, 3},
		{"skiplock_tasks_enqueued_total", []string{"queue", "default", "name", "ok"}, 2},
		{"skiplock_tasks_enqueued_total", []string{"queue", "mail", "name", "boom"}, 1},
		{"skiplock_tasks_started_total", []string{"queue", "mail", "name", "ok"}, 3},
		{"skiplock_tasks_started_total", []string{"queue", "mail", "name", "boom"}, 2},
		{"skiplock_tasks_completed_total", []string{"queue", "mail", "name", "ok"}, 3},
		{"skiplock_tasks_completed_total", []string{"queue", "default", "name", "ok"}, 2},
		{"skiplock_tasks_completed_total", []string{"queue", "mail", "name", "nap"}, 1},
		{"skiplock_tasks_failed_total", []string{"queue", "mail", "name", "boom"}, 1},
		{"skiplock_tasks_retried_total", []string{"queue", "mail", "name", "boom"}, 1},
		{"skiplock_task_attempts_total", []string{"queue", "mail", "name", "boom", "outcome", "error"}, 2},
		{"skiplock_task_attempts_total", []string{"queue", "mail", "name", "nap", "outcome", "snoozed"}, 1},
		{"skiplock_task_attempts_total", []string{"queue", "mail", "name", "ok", "outcome", "success"}, 3},
		{"skiplock_task_duration_seconds", []string{"queue", "mail", "name", "ok"}, 3},
		{"skiplock_task_duration_seconds", []string{"queue", "mail", "name", "boom"}, 2},
		{"skiplock_tasks_running", []string{"queue", "mail", "name", "ok"}, 0},
		{"skiplock_queue_up", nil, 1},
		{"skiplock_queue_failed_tasks", []string{"queue", "mail"}, 1},
		{"skiplock_queue_pending_tasks", []string{"queue", "slow"}, 1},
		{"skiplock_queue_due_tasks", []string{"queue", "slow"}, 0},
		{"skiplock_queue_paused", []string{"queue", "slow"}, 0},
	}
	for _, c := range checks {
		if got := value(t, f, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Every claim is observed, with the tasks it took: 9 attempts in all
	// (3+2 ok, 2 boom, 2 nap).
	var claimed float64
	var claims uint64
	for _, s := range f["skiplock_claim_batch_size"].Metric {
		claimed += s.Histogram.GetSampleSum()
		claims += s.Histogram.GetSampleCount()
	}
	if claimed != 9 || claims == 0 {
		t.Errorf("claim batch sizes add up to %v over %d claims, want 9", claimed, claims)
	}
}

func TestQueueCollectorCaches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client := queue.New(b.pool)
	reg := prometheus.NewRegistry()
	reg.MustRegister(observe.NewQueueCollector(client, observe.QueueCollectorOptions{CacheFor: 3600e9}))
	enqueue(t, client, "a")
	if got := value(t, scrape(t, observe.Handler(reg)), "skiplock_queue_due_tasks", "queue", "default"); got != 1 {
		t.Fatalf("due = %v, want 1", got)
	}
	enqueue(t, client, "a")
	if got := value(t, scrape(t, observe.Handler(reg)), "skiplock_queue_due_tasks", "queue", "default"); got != 1 {
		t.Fatalf("due = %v within the cache period, want the cached 1", got)
	}
}

func TestQueueCollectorDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client := queue.New(b.pool)
	reg := prometheus.NewRegistry()
	reg.MustRegister(observe.NewQueueCollector(client, observe.QueueCollectorOptions{Logger: discard()}))
	b.pool.Close()
	f := scrape(t, observe.Handler(reg))
	if got := value(t, f, "skiplock_queue_up"); got != 0 {
		t.Fatalf("skiplock_queue_up = %v with the pool closed, want 0", got)
	}
	if _, ok := f["skiplock_queue_due_tasks"]; ok {
		t.Fatal("per-queue series served without a reading")
	}
}
