// Package roles runs skiplock's clients as the database roles that
// `skiplock migrate grants` describes, with exactly the grants it prints
// (migrations.Grants) and EXECUTE revoked from PUBLIC: producers enqueue
// every way there is, workers run and rescue each other, and a role cannot
// do what its kind does not need. The skiplock command's and the
// dashboard's roles (observer, operator) are tested beside them, in
// cmd/skiplock/internal/cli and cmd/skiplock/internal/ui.
package roles

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is a migrated schema and a superuser's view of it, to set up and
// to check what the roles did.
type bundle struct {
	schema string
	admin  *pgxpool.Pool
	client *queue.Client
}

func setup(t *testing.T) *bundle {
	t.Helper()
	schema := pgtest.Schema(t, true)
	admin := pgtest.NewPool(t, schema)
	return &bundle{schema: schema, admin: admin, client: queue.New(admin)}
}

// as returns a pool connected as a new role of kind, with its grants.
func (b *bundle) as(t *testing.T, kind migrations.RoleKind) (role string, pool *pgxpool.Pool) {
	t.Helper()
	role = pgtest.Role(t, b.schema, kind)
	return role, pgtest.PoolAs(t, b.schema, role)
}

// snapshot is every row of every skiplock table: what a refused change
// must leave as it was.
func (b *bundle) snapshot(t *testing.T) string {
	t.Helper()
	var s string
	err := b.admin.QueryRow(context.Background(), `
		SELECT concat_ws(' | ',
			(SELECT string_agg(t::text, ',' ORDER BY t.id) FROM skiplock_tasks AS t),
			(SELECT string_agg(w::text, ',' ORDER BY w.id) FROM skiplock_workflows AS w),
			(SELECT string_agg(q::text, ',' ORDER BY q.name) FROM skiplock_queues AS q),
			(SELECT string_agg(l::text, ',' ORDER BY l.kind, l.target) FROM skiplock_limits AS l),
			(SELECT string_agg(w::text, ',' ORDER BY w.id) FROM skiplock_workers AS w))`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *bundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := b.admin.QueryRow(context.Background(), "SELECT count(*) FROM skiplock_tasks WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bundle) get(t *testing.T, id int64) *queue.Task {
	t.Helper()
	task, err := b.client.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// wantDenied fails the test unless err is the readable permission error
// of a missing grant.
func wantDenied(t *testing.T, what string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s: allowed, want permission denied", what)
	case !errors.Is(err, queue.ErrPermissionDenied) || pgerr.Code(err) != "42501":
		t.Fatalf("%s: %v, want queue.ErrPermissionDenied (SQLSTATE 42501)", what, err)
	case !strings.Contains(err.Error(), "permission denied for") || !strings.Contains(err.Error(), "skiplock migrate grants"):
		t.Fatalf("%s: %q does not say what is denied and where the grants are", what, err)
	}
}

// logBuffer collects a worker's warnings and errors.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// noDenials fails the test if a worker logged a permission error: a
// background job (retention, heartbeats, the rescuer) lacking a grant
// logs and carries on.
func noDenials(t *testing.T, logs ...*logBuffer) {
	t.Helper()
	for i, l := range logs {
		if s := l.String(); strings.Contains(s, "permission denied") || strings.Contains(s, "42501") {
			t.Fatalf("worker %d logged a permission error:\n%s", i, s)
		}
	}
}

// start runs a worker until the test ends (or stop is called) and checks
// that Run returns nil.
func start(t *testing.T, pool *pgxpool.Pool, cfg worker.Config, handlers worker.Handlers) (w *worker.Worker, stop func()) {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.RescueInterval == 0 {
		cfg.RescueInterval = 100 * time.Millisecond
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = 100 * time.Millisecond
	}
	if cfg.RetryBackoff == nil {
		cfg.RetryBackoff = func(int) time.Duration { return 0 }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w = worker.New(pool, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, handlers) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(pgtest.Patient(60 * time.Second)):
				t.Errorf("Run did not return within 60s of cancellation")
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

func waitFor(t *testing.T, expect time.Duration, what string, cond func() bool) {
	t.Helper()
	pgtest.Eventually(t, expect, what, cond)
}
