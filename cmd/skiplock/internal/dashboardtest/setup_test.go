package dashboardtest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is a migrated schema with a dashboard serving it.
type bundle struct {
	pool   *pgxpool.Pool
	client *queue.Client
	url    string // the dashboard, without the trailing slash
	origin string // the server, without the prefix
}

// setup serves the dashboard of a fresh schema until the test ends,
// mounted under opts.Prefix with http.StripPrefix, as the package doc
// says, behind wrap (the application's middleware) when not nil.
func setup(t *testing.T, opts dashboard.Options, wrap ...func(http.Handler) http.Handler) *bundle {
	t.Helper()
	pool := pgtest.Pool(t)
	b := &bundle{pool: pool, client: queue.New(pool)}
	if opts.Logger == nil {
		opts.Logger = discard()
	}
	h, err := dashboard.New(b.client, opts)
	if err != nil {
		t.Fatal(err)
	}
	var mounted http.Handler = http.StripPrefix(opts.Prefix, h)
	for _, w := range wrap {
		mounted = w(mounted)
	}
	mux := http.NewServeMux()
	mux.Handle(opts.Prefix+"/", mounted)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b.origin = srv.URL
	b.url = srv.URL + opts.Prefix
	return b
}

// insert adds a task in any state, finished ago before now when it is
// finished.
func (b *bundle) insert(t *testing.T, queueName, name string, status queue.Status, payload, errs string, ago time.Duration) int64 {
	t.Helper()
	if payload == "" {
		payload = "null"
	}
	if errs == "" {
		errs = "[]"
	}
	var id int64
	err := b.pool.QueryRow(context.Background(), `
		INSERT INTO skiplock_tasks (queue, name, status, payload, errors, attempt, max_attempts, worker_id, created_at, started_at, finished_at)
		VALUES ($1, $2, $3, $4::jsonb, $5::jsonb,
		        CASE WHEN $3 = 'pending' THEN 0 ELSE 1 END, 3,
		        CASE WHEN $3 = 'pending' THEN NULL ELSE 'worker-1' END,
		        now() - $6::interval - interval '1 second',
		        CASE WHEN $3 <> 'pending' THEN now() - $6::interval - interval '200 milliseconds' END,
		        CASE WHEN $3 IN ('completed', 'failed', 'cancelled') THEN now() - $6::interval END)
		RETURNING id`, queueName, name, string(status), payload, errs, ago.String()).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// failure is an error history of one failed attempt.
func failure(msg string) string {
	return fmt.Sprintf(`[{"attempt":1,"outcome":"error","error":%q,"worker_id":"worker-1","host":"box","pid":7,
		"started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z"}]`, msg)
}

func (b *bundle) status(t *testing.T, id int64) queue.Status {
	t.Helper()
	task, err := b.client.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return task.Status
}

// hostile is a payload that runs script if it is not escaped.
const hostile = `{"x": "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>"}`

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
