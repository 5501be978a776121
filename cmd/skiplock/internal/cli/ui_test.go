package cli_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
	"github.com/skiplock/skiplock/queue"
)

func TestUIRefusesNonLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"0.0.0.0:8080", ":8080", "192.0.2.10:8080"} {
		// No database either: the address is refused before connecting.
		var b *bundle
		r := b.run(t, "ui", "--listen", listen)
		line := r.oneLine(t)
		if r.code != cli.ExitUsage || !strings.Contains(line, "refusing") || !strings.Contains(line, "SKIPLOCK_UI_TOKEN") {
			t.Errorf("ui --listen %s: exit %d, %q; want exit 2 refusing without a token", listen, r.code, line)
		}
	}
}

// serveUI runs `skiplock ui` with args until the test ends and returns the
// URL it prints.
func (b *bundle) serveUI(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, append([]string{"ui"}, args...), cli.Env{
			Stdout: w, Stderr: &stderr,
			Getenv: func(k string) string {
				if k == "DATABASE_URL" {
					return b.url
				}
				return env[k]
			},
		})
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != cli.ExitOK {
			t.Errorf("skiplock ui exited %d: %s", code, stderr.String())
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("skiplock ui printed no URL: %v (stderr: %s)", err, stderr.String())
	}
	go io.Copy(io.Discard, out)
	m := regexp.MustCompile(`http://\S+/`).FindString(line)
	if m == "" || !strings.Contains(line, b.schema) {
		t.Fatalf("skiplock ui printed %q, want the schema and a URL", line)
	}
	return m
}

func TestUIServes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, "mail", "email.send", queue.StatusFailed, 1, 1, "smtp down")
	url := b.serveUI(t, nil, "--listen", "127.0.0.1:0", "--refresh", "0")
	client := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"", "tasks", "failed", "locks"} {
		resp, err := client.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "mail") && path != "locks" {
			t.Errorf("GET /%s: %s", path, resp.Status)
		}
		if strings.Contains(string(body), `data-refresh="5"`) {
			t.Errorf("GET /%s: auto-refresh on despite --refresh 0", path)
		}
	}
}

func TestUIToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url := b.serveUI(t, map[string]string{"SKIPLOCK_UI_TOKEN": "s3cret"}, "--listen", "0.0.0.0:0")
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %s, want 401", resp.Status)
	}
	req.SetBasicAuth("ops", "s3cret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with the token: %s, want 200", resp.Status)
	}
}
