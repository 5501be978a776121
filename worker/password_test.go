package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/worker"
)

// secret is the password of these tests' connection strings. pgx masks the
// password of a string it cannot parse only where it can tell it is one:
// key=value settings with spaces around = escape it.
const (
	secret                 = "s3cret"
	unparsableWithPassword = "host=db.internal port=x user=u password = " + secret
)

// TestRunHidesPassword: worker.Run's error for a DATABASE_URL it cannot use
// names no password.
func TestRunHidesPassword(t *testing.T) {
	t.Setenv("DATABASE_URL", unparsableWithPassword)
	err := worker.Run(worker.Handlers{"x": func(context.Context, *worker.Task) error { return nil }})
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") || strings.Contains(err.Error(), secret) {
		t.Fatalf("Run: %v", err)
	}
}

// TestLogsHidePassword: a worker's log names no password of its pool or of
// its ListenURL, through a lock session lost and regained, and a ListenURL
// that does not parse.
func TestLogsHidePassword(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := pgtest.Config(t, b.schema)
	cfg.ConnConfig.Password = secret // the test server trusts the loopback: any password will do
	pool := pgtest.PoolFromConfig(t, cfg)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	handlers := worker.Handlers{"x": func(context.Context, *worker.Task) error { return nil }}

	w, stop := start(t, pool, worker.Config{Logger: log}, handlers)
	waitFor(t, 5*time.Second, "the worker's start", func() bool { return strings.Contains(logs.String(), "worker started") })
	b.terminateLockSession(t, w)
	waitFor(t, 5*time.Second, "the lock session's return", func() bool { return strings.Contains(logs.String(), "lock session reconnected") })
	stop()

	_, stop = start(t, pool, worker.Config{Mode: worker.ModeLease, ListenURL: unparsableWithPassword, Logger: log}, handlers)
	waitFor(t, 5*time.Second, "the ListenURL's error", func() bool { return strings.Contains(logs.String(), "ListenURL is not a connection string") })
	stop()
	if strings.Contains(logs.String(), secret) {
		t.Fatalf("the log shows the password:\n%s", logs.String())
	}
}
