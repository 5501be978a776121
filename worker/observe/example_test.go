package observe_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker/observe"
)

// Producers count what they enqueue; a QueueCollector reads the backlog
// from the database when /metrics is scraped.
func ExampleNewMetrics() {
	pool, done := pgtest.ExamplePool()
	defer done()
	ctx := context.Background()

	metrics := observe.NewMetrics(observe.MetricsOptions{})
	client := queue.New(pool, queue.WithEnqueueHooks(metrics))
	for range 2 {
		if _, err := client.Enqueue(ctx, "email.send", nil, queue.WithQueue("mail")); err != nil {
			panic(err)
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, observe.NewQueueCollector(client, observe.QueueCollectorOptions{}))
	rec := httptest.NewRecorder()
	observe.Handler(reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "skiplock_tasks_enqueued_total") || strings.HasPrefix(line, "skiplock_queue_due_tasks") {
			fmt.Println(line)
		}
	}
	// Output:
	// skiplock_queue_due_tasks{queue="mail"} 2
	// skiplock_tasks_enqueued_total{name="email.send",queue="mail"} 2
}
