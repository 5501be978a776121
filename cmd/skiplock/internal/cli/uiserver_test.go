package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestCheckListen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:8080", "", true},
		{"localhost:0", "", true},
		{"[::1]:8080", "", true},
		{"127.0.0.2:8080", "", true},
		{"0.0.0.0:8080", "", false},
		{":8080", "", false},
		{"[::]:8080", "", false},
		{"10.0.0.5:8080", "", false},
		{"dashboard.internal:8080", "", false},
		{"0.0.0.0:8080", "s3cret", true},
		{":8080", "s3cret", true},
	} {
		err := checkListen(c.addr, c.token)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, errNoCredentials)) {
			t.Errorf("checkListen(%q, %q) = %v, want ok=%v", c.addr, c.token, err, c.ok)
		}
	}
	if err := checkListen("8080", ""); err == nil || errors.Is(err, errNoCredentials) {
		t.Errorf("checkListen(\"8080\") = %v, want an invalid address", err)
	}
}

// dashboardStub stands in for the dashboard: the server's checks come
// before it.
var dashboardStub = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "dashboard") })

// serveStub serves the stub on listen until the test ends, and returns its
// URL without the trailing slash.
func serveStub(t *testing.T, listen, token string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveUI(ctx, listen, &uiServer{token: token, dashboard: dashboardStub}, slog.New(slog.DiscardHandler),
			func(u string) { ready <- u })
	}()
	select {
	case u := <-ready:
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serveUI: %v", err)
			}
		})
		return strings.TrimSuffix(u, "/")
	case err := <-done:
		cancel()
		t.Fatalf("serveUI: %v", err)
	}
	return ""
}

func TestServeUIRefusesNonLoopbackWithoutCredentials(t *testing.T) {
	t.Parallel()
	err := serveUI(context.Background(), "0.0.0.0:0", &uiServer{dashboard: dashboardStub}, slog.New(slog.DiscardHandler), func(string) {
		t.Error("serveUI listened on 0.0.0.0 without a token")
	})
	if !errors.Is(err, errNoCredentials) || !strings.Contains(err.Error(), uiTokenEnv) {
		t.Fatalf("serveUI = %v, want errNoCredentials naming %s", err, uiTokenEnv)
	}
}

func TestUIServerAuth(t *testing.T) {
	t.Parallel()
	url := serveStub(t, "0.0.0.0:0", "s3cret")
	cases := []struct {
		name string
		auth func(*http.Request)
		want int
	}{
		{"no credentials", func(*http.Request) {}, http.StatusUnauthorized},
		{"wrong password", func(r *http.Request) { r.SetBasicAuth("admin", "nope") }, http.StatusUnauthorized},
		{"wrong bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") }, http.StatusUnauthorized},
		{"basic auth", func(r *http.Request) { r.SetBasicAuth("anyone", "s3cret") }, http.StatusOK},
		{"bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") }, http.StatusOK},
	}
	for _, path := range []string{"/", "/tasks", "/static/style.css"} {
		for _, c := range cases {
			req, _ := http.NewRequest(http.MethodGet, url+path, nil)
			c.auth(req)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("GET %s with %s: %s, want %d", path, c.name, resp.Status, c.want)
			}
			if c.want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("GET %s with %s: no basic auth challenge", path, c.name)
			}
		}
	}
}

func TestUIServerLoopbackOnlyAnswersLocalHosts(t *testing.T) {
	t.Parallel()
	url := serveStub(t, "127.0.0.1:0", "")
	for host, want := range map[string]int{
		"":                     http.StatusOK, // the URL's own, 127.0.0.1:port
		"localhost:8080":       http.StatusOK,
		"[::1]:8080":           http.StatusOK,
		"attacker.example":     http.StatusForbidden, // DNS rebinding
		"attacker.example:80":  http.StatusForbidden,
		"192.168.1.20:8080":    http.StatusForbidden,
		"localhost.evil.test:": http.StatusForbidden,
	} {
		req, _ := http.NewRequest(http.MethodGet, url+"/", nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %s, want %d", host, resp.Status, want)
		}
	}
}
