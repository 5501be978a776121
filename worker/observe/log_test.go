package observe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
	"github.com/skiplock/skiplock/worker/observe"
)

// syncBuffer is a bytes.Buffer that handlers on many goroutines can write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == "skiplock: task attempt" {
			out = append(out, m)
		}
	}
	return out
}

func TestLogging(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		level   slog.Level
		opts    observe.LogOptions
		lines   int
		payload bool
	}{
		{"info logger: quiet", slog.LevelInfo, observe.LogOptions{}, 0, false},
		{"debug logger: a line per attempt", slog.LevelDebug, observe.LogOptions{}, 3, false},
		{"failures at warn", slog.LevelInfo, observe.LogOptions{FailureLevel: slog.LevelWarn}, 2, false},
		{"payloads when asked", slog.LevelDebug, observe.LogOptions{Payload: true}, 3, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			client := queue.New(b.pool)
			var buf syncBuffer
			logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: c.level}))
			secret := map[string]string{"password": "hunter2"}
			ids := map[string]int64{}
			for _, n := range []string{"ok", "boom"} {
				id, err := client.Enqueue(context.Background(), n, secret, queue.WithMaxAttempts(2))
				if err != nil {
					t.Fatal(err)
				}
				ids[n] = id.ID
			}
			stop := b.run(t, worker.Config{Middleware: []worker.Middleware{observe.Logging(logger, c.opts)}}, handlers())
			b.waitFinished(t)
			stop()

			lines := buf.lines(t)
			if len(lines) != c.lines {
				t.Fatalf("%d attempt lines, want %d (ok once, boom twice):\n%s", len(lines), c.lines, buf.buf.String())
			}
			if strings.Contains(buf.buf.String(), "hunter2") != c.payload {
				t.Fatalf("payload in the log = %v, want %v:\n%s", !c.payload, c.payload, buf.buf.String())
			}
			for _, l := range lines {
				for _, k := range []string{"task_id", "name", "queue", "attempt", "outcome", "duration"} {
					if _, ok := l[k]; !ok {
						t.Errorf("line %v has no %s", l, k)
					}
				}
				id := int64(l["task_id"].(float64))
				switch {
				case id == ids["ok"] && l["outcome"] == "success" && l["error"] == nil:
				case id == ids["boom"] && l["outcome"] == "error" && l["error"] == "boom":
				default:
					t.Errorf("unexpected line %v", l)
				}
			}
		})
	}
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }
