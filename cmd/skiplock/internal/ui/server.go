// Package ui is the dashboard that `skiplock ui` serves: queues with their
// backlog, throughput and failure rate over the last hour (read from the
// table), tasks paged by ID and filtered by state, queue and name, a task's
// history, failed tasks to requeue or cancel, tasks to enqueue, run now or
// delete, periodic schedules, rate limits, and who holds which task lock. Pages are rendered on the server with html/template from
// assets embedded in the binary; a small script refreshes them and asks
// for confirmations.
//
// Security: without a token it answers only requests whose Host is a
// loopback name (against DNS rebinding), and Serve refuses to listen on a
// non-loopback address without one. State changes are POSTs carrying a
// per-process CSRF token in a form field and a SameSite cookie, from the
// same origin. Every response forbids framing and inline script.
package ui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/queue"
)

// Defaults of Config.
const (
	DefaultRefresh = 5 * time.Second
	// PageSize is how many tasks a page lists.
	PageSize = 50
)

// TokenEnv is the environment variable that `skiplock ui` reads the token
// from when --token is not given.
const TokenEnv = "SKIPLOCK_UI_TOKEN"

//go:embed templates static
var assets embed.FS

// Config configures a Server.
type Config struct {
	// Client reads and changes the tasks. Required.
	Client *queue.Client
	// Token, when set, is required of every request: as the password of
	// HTTP basic auth (any user name), which browsers prompt for, or as
	// "Authorization: Bearer TOKEN".
	Token string
	// Refresh is how often pages refresh themselves. Defaults to
	// DefaultRefresh (5s); negative turns it off.
	Refresh time.Duration
	// Logger receives errors. Defaults to slog.Default().
	Logger *slog.Logger
}

// Server is the dashboard, an http.Handler.
type Server struct {
	cfg     Config
	client  *queue.Client
	csrf    string
	pages   map[string]*template.Template
	handler http.Handler
	static  http.Handler

	throughput cached[throughput]
}

// New returns the dashboard of cfg.Client's schema.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("ui: Config.Client is required")
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	static, _ := fs.Sub(assets, "static")
	s := &Server{
		cfg:    cfg,
		client: cfg.Client,
		csrf:   hex.EncodeToString(secret[:]),
		pages:  pages,
		static: http.StripPrefix("/static/", http.FileServerFS(static)),
	}
	s.throughput.ttl = 5 * time.Second
	s.handler = s.routes()
	return s, nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.queuesPage)
	mux.HandleFunc("GET /tasks", s.tasksPage)
	mux.HandleFunc("GET /tasks/{id}", s.taskPage)
	mux.HandleFunc("GET /workflows/{id}", s.workflowPage)
	mux.HandleFunc("GET /sequence", s.sequencePage)
	mux.HandleFunc("GET /failed", s.failedPage)
	mux.HandleFunc("GET /locks", s.locksPage)
	mux.HandleFunc("GET /enqueue", s.enqueuePage)
	mux.HandleFunc("GET /periodic", s.periodicPage)
	mux.HandleFunc("GET /ratelimits", s.rateLimitsPage)
	mux.HandleFunc("POST /enqueue", s.enqueue)
	mux.HandleFunc("POST /tasks/{id}/run-now", s.runNow)
	mux.HandleFunc("POST /tasks/{id}/delete", s.deleteOne)
	mux.HandleFunc("GET /static/", s.serveStatic)
	mux.HandleFunc("POST /tasks/{id}/requeue", s.requeueOne)
	mux.HandleFunc("POST /tasks/{id}/cancel", s.cancelOne)
	mux.HandleFunc("POST /tasks/{id}/cancel-running", s.cancelRunning)
	mux.HandleFunc("POST /requeue", s.requeueMany)
	mux.HandleFunc("POST /cancel", s.cancelMany)
	mux.HandleFunc("POST /queues/{name}/pause", s.pause)
	mux.HandleFunc("POST /queues/{name}/resume", s.resume)
	return mux
}

// ServeHTTP checks the request (credentials, Host, CSRF) and sets the
// security headers before routing it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")

	if s.cfg.Token != "" {
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
	if r.Method == http.MethodPost {
		if err := s.checkCSRF(r); err != nil {
			http.Error(w, "403 forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
	}
	if !strings.HasPrefix(r.URL.Path, "/static/") {
		h.Set("Cache-Control", "no-store")
	}
	s.handler.ServeHTTP(w, r)
}

func (s *Server) serveStatic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=300")
	s.static.ServeHTTP(w, r)
}

func (s *Server) authorized(r *http.Request) bool {
	if _, pass, ok := r.BasicAuth(); ok {
		return equal(pass, s.cfg.Token)
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return equal(strings.TrimSpace(tok), s.cfg.Token)
	}
	return false
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// csrfCookie carries the CSRF token, so that a POST must show it twice: in
// the form (which only our pages hold) and in a cookie that SameSite keeps
// from cross-site requests.
const csrfCookie = "skiplock_csrf"

func (s *Server) checkCSRF(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("cross-site request (Sec-Fetch-Site: %s)", site)
	}
	if origin := r.Header.Get("Origin"); origin != "" && origin != "null" {
		u, err := url.Parse(origin)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("request from another origin (%s)", origin)
		}
	} else if origin == "null" {
		return errors.New("request from an opaque origin")
	}
	if !equal(r.PostFormValue("csrf"), s.csrf) {
		return errors.New("missing or wrong CSRF token; reload the page and try again")
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || !equal(c.Value, s.csrf) {
		return errors.New("missing CSRF cookie; reload the page and try again")
	}
	return nil
}

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

// ErrNoCredentials is returned by CheckListen for a non-loopback address
// without a token.
var ErrNoCredentials = errors.New("refusing to serve the dashboard beyond this machine without credentials")

// CheckListen validates a listen address: a non-loopback one (including
// ":8080", every interface) needs a token.
func CheckListen(addr, token string) error {
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
		"set a token with --token or %s, or listen on 127.0.0.1", ErrNoCredentials, addr, where, TokenEnv)
}

// Serve listens on addr and serves the dashboard until ctx ends. It
// refuses a non-loopback address without a token (CheckListen). ready, if
// not nil, is called with the dashboard's URL once it listens.
func Serve(ctx context.Context, addr string, cfg Config, ready func(url string)) error {
	if err := CheckListen(addr, cfg.Token); err != nil {
		return err
	}
	s, err := New(cfg)
	if err != nil {
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
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
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

// cached holds one reading of something for ttl, shared by concurrent
// requests.
type cached[T any] struct {
	ttl time.Duration
	mu  sync.Mutex
	at  time.Time
	v   T
}

func (c *cached[T]) get(read func() (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.ttl {
		return c.v, nil
	}
	v, err := read()
	if err != nil {
		return v, err
	}
	c.v, c.at = v, time.Now()
	return v, nil
}
