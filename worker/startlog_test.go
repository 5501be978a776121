package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/worker"
)

// A worker's start is quiet at info: one line, "worker started". The
// elections it wins (the rescuer, the scheduler) are routine, at debug.
func TestStartIsOneLineAtInfo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &syncBuffer{}
	cfg := worker.Config{
		Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		RescueInterval: time.Second, // the default
		Periodic:       []worker.PeriodicTask{{Name: "hourly", Every: time.Hour, Task: "tick"}},
	}
	start(t, b.pool, cfg, worker.Handlers{"tick": func(context.Context, *worker.Task) error { return nil }})
	for _, want := range []string{"worker started", "now runs the rescuer", "now runs the scheduler"} {
		waitFor(t, 30*time.Second, want, func() bool { return strings.Contains(logs.String(), want) })
	}
	// A few of the rescuer's passes, the scheduler's first look.
	time.Sleep(3 * cfg.RescueInterval)
	var info []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(line, "level=DEBUG") ||
			// Told only when a look is slow, which a busy machine makes it.
			strings.Contains(line, "a look for orphaned tasks was slow") {
			continue
		}
		info = append(info, line)
	}
	if len(info) != 1 || !strings.Contains(info[0], `level=INFO msg="skiplock: worker started"`) {
		t.Fatalf("at start, %d lines at info and above, want 1 (worker started):\n%s", len(info), strings.Join(info, "\n"))
	}
}
