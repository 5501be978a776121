package cli

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The server of `skiplock ui`: the dashboard (package queue/dashboard) on
// an address of its own, with one shared token. Without a token it answers
// only requests whose Host is a loopback name (against DNS rebinding), and
// refuses to listen on a non-loopback address.

// uiTokenEnv is the environment variable that `skiplock ui` reads the token
// from when --token is not given.
const uiTokenEnv = "SKIPLOCK_UI_TOKEN"

// uiActor is who the audit trail records for the changes made through
// `skiplock ui`: one token does not say who holds it.
const uiActor = "skiplock ui"

// errNoCredentials is returned by checkListen for a non-loopback address
// without a token.
var errNoCredentials = errors.New("refusing to serve the dashboard beyond this machine without credentials")

// checkListen validates a listen address: a non-loopback one (including
// ":8080", every interface) needs a token.
func checkListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("invalid listen address %q (want HOST:PORT, such as 127.0.0.1:8080): %v", addr, err)
	}
	if isLoopback(host) || token != "" {
		return nil
	}
	where := "is not a loopback address"
	if ip := net.ParseIP(strings.Trim(host, "[]")); host == "" || (ip != nil && ip.IsUnspecified()) {
		where = "listens on every interface"
	}
	return fmt.Errorf("%w: %s %s: anyone who can reach it could requeue and cancel tasks; "+
		"set a token with --token or %s, or listen on 127.0.0.1", errNoCredentials, addr, where, uiTokenEnv)
}

// uiServer checks every request's credentials before the dashboard sees
// it: the token, or without one a loopback Host.
type uiServer struct {
	token     string
	dashboard http.Handler
}

func (s *uiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	if s.token != "" {
		if !s.authorized(r) {
			h.Set("WWW-Authenticate", `Basic realm="skiplock", charset="UTF-8"`)
			http.Error(w, "401 unauthorized: this dashboard needs its token (as the password, any user name)", http.StatusUnauthorized)
			return
		}
	} else if !loopbackHost(r.Host) {
		// Without a token the dashboard trusts the loopback interface; a
		// page of another site that rebinds its name to 127.0.0.1 must
		// not be served as if it came from here.
		http.Error(w, "403 forbidden: without a token this dashboard answers only to localhost and loopback addresses", http.StatusForbidden)
		return
	}
	s.dashboard.ServeHTTP(w, r)
}

func (s *uiServer) authorized(r *http.Request) bool {
	if _, pass, ok := r.BasicAuth(); ok {
		return equalToken(pass, s.token)
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return equalToken(strings.TrimSpace(tok), s.token)
	}
	return false
}

func equalToken(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// loopbackHost reports whether a Host header names this machine.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return isLoopback(host)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveUI listens on addr and serves s until ctx ends. It refuses a
// non-loopback address without a token (checkListen). ready, if not nil,
// is called with the dashboard's URL once it listens.
func serveUI(ctx context.Context, addr string, s *uiServer, log *slog.Logger, ready func(url string)) error {
	if err := checkListen(addr, s.token); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		shut, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = srv.Shutdown(shut)
	}()
	if ready != nil {
		ready(dashboardURL(ln.Addr()))
	}
	err = srv.Serve(ln)
	cancel()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func dashboardURL(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return "http://" + a.String() + "/"
	}
	host := "127.0.0.1"
	if !tcp.IP.IsUnspecified() {
		host = tcp.IP.String()
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(tcp.Port)) + "/"
}
