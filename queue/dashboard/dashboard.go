package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

// Defaults and limits of Options.
const (
	// DefaultRefresh is how often pages refresh themselves.
	DefaultRefresh = 5 * time.Second
	// DefaultActor is the actor the audit trail records for an action when
	// Options.Authorize is nil or names nobody.
	DefaultActor = "dashboard"
	// PageSize is how many tasks, or audit records, a page lists.
	PageSize = 50
	// MinCSRFToken is the length Options.CSRFToken needs at least.
	MinCSRFToken = 32
)

//go:embed templates static
var assets embed.FS

// Options configure the dashboard. The zero value serves every page and
// action at the root of the handler.
type Options struct {
	// Prefix is the path the dashboard is mounted at, as browsers see it,
	// such as "/admin/jobs": its links, forms, assets, redirects and
	// cookies carry it. The handler itself serves paths under it with the
	// prefix removed: mount it with http.StripPrefix(Prefix, h) on the
	// pattern Prefix+"/". It begins with "/" and has no trailing "/"; each
	// segment is a URL path segment that needs no escaping. Defaults to ""
	// (the root).
	Prefix string
	// ReadOnly hides every action (requeue, cancel, run now, delete,
	// pause, resume, enqueue) from the pages and refuses every POST with
	// 403 before it is read.
	ReadOnly bool
	// Authorize, if set, is called for each action before anything is
	// changed, with the request (its context carries whatever the
	// application's middleware put there) and what it would do. It returns
	// who asks, which the audit trail records as the actor with source
	// "dashboard" (DefaultActor when empty), or an error: the action is
	// refused with 403, the error's text shown, and nothing is changed.
	// Nil allows every action to whoever reaches the handler and records
	// DefaultActor.
	Authorize func(r *http.Request, a Action) (actor string, err error)
	// Refresh is how often pages refresh themselves. Defaults to
	// DefaultRefresh (5s); negative turns it off.
	Refresh time.Duration
	// Logger receives errors (5xx) and refused actions. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// CSRFToken is the token that every form, and a SameSite cookie, must
	// carry for a POST to be accepted. Defaults to a random one for each
	// New; replicas that serve one address behind a load balancer must
	// share one, of at least MinCSRFToken random characters, kept secret
	// like a password.
	CSRFToken string
}

// Action is a change that the dashboard is asked to make, as Authorize
// sees it.
type Action struct {
	// Kind is the change: queue.AuditRequeue, AuditCancel,
	// AuditCancelRunning, AuditRunNow, AuditDelete, AuditPause,
	// AuditResume, AuditEnqueue, AuditSchedulePause, AuditScheduleResume
	// or AuditScheduleRemove.
	Kind queue.AuditAction
	// IDs are the tasks named, for an action on tasks picked one by one.
	IDs []int64
	// Filter selects the tasks of an action on "every matching task";
	// nil otherwise.
	Filter *queue.Filter
	// Queue is the queue to pause or resume, or the queue of a task to
	// enqueue.
	Queue string
	// Task is the name of a task to enqueue.
	Task string
	// Schedule is the stored schedule to pause, resume or remove.
	Schedule string
}

// String describes the action: "requeue tasks 4, 7", "pause queue mail".
func (a Action) String() string {
	var b strings.Builder
	b.WriteString(string(a.Kind))
	switch {
	case a.Kind == queue.AuditEnqueue:
		fmt.Fprintf(&b, " task %s in queue %s", a.Task, a.Queue)
	case a.Schedule != "":
		fmt.Fprintf(&b, " schedule %s", a.Schedule)
	case a.Queue != "":
		fmt.Fprintf(&b, " queue %s", a.Queue)
	case a.Filter != nil:
		b.WriteString(" every matching task")
	case len(a.IDs) == 1:
		fmt.Fprintf(&b, " task %d", a.IDs[0])
	case len(a.IDs) > 0:
		ids := make([]string, len(a.IDs))
		for i, id := range a.IDs {
			ids[i] = fmt.Sprint(id)
		}
		fmt.Fprintf(&b, " tasks %s", strings.Join(ids, ", "))
	}
	return b.String()
}

// handler is the dashboard.
type handler struct {
	opts    Options
	client  *queue.Client
	csrf    string
	pages   map[string]*template.Template
	routes  http.Handler
	static  http.Handler
	through cached[throughput]
	// unhandled: the pending tasks no live worker handles, which reads
	// every pending task, so at most once per ttl however often pages
	// refresh.
	unhandled cached[[]ops.UnhandledTasks]
}

// New returns the dashboard of client's schema as an http.Handler. It
// fails for invalid Options.
func New(client *queue.Client, opts Options) (http.Handler, error) {
	if client == nil {
		return nil, errors.New("making the dashboard: a queue.Client is required")
	}
	if err := checkPrefix(opts.Prefix); err != nil {
		return nil, err
	}
	if opts.Refresh == 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CSRFToken == "" {
		var secret [32]byte
		if _, err := rand.Read(secret[:]); err != nil {
			return nil, err
		}
		opts.CSRFToken = hex.EncodeToString(secret[:])
	} else if len(opts.CSRFToken) < MinCSRFToken {
		return nil, fmt.Errorf("making the dashboard: Options.CSRFToken must be at least %d characters, got %d", MinCSRFToken, len(opts.CSRFToken))
	}
	h := &handler{opts: opts, client: client, csrf: opts.CSRFToken}
	var err error
	if h.pages, err = parsePages(opts.Prefix); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(assets, "static")
	h.static = http.StripPrefix("/static/", http.FileServerFS(static))
	h.through.ttl = 5 * time.Second
	h.unhandled.ttl = 10 * time.Second
	h.routes = h.mux()
	return h, nil
}

// checkPrefix validates Options.Prefix.
func checkPrefix(p string) error {
	if p == "" {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("making the dashboard: Options.Prefix %q %s (want a path such as /admin/jobs)", p, why)
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return bad("must begin with / and not end with one")
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." || url.PathEscape(seg) != seg {
			return bad("has a segment that is empty, a dot, or needs escaping")
		}
	}
	return nil
}

func (h *handler) mux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.queuesPage)
	mux.HandleFunc("GET /tasks", h.tasksPage)
	mux.HandleFunc("GET /tasks/{id}", h.taskPage)
	mux.HandleFunc("GET /workflows/{id}", h.workflowPage)
	mux.HandleFunc("GET /batches", h.batchesPage)
	mux.HandleFunc("GET /batches/{id}", h.batchPage)
	mux.HandleFunc("GET /sequence", h.sequencePage)
	mux.HandleFunc("GET /failed", h.failedPage)
	mux.HandleFunc("GET /locks", h.locksPage)
	mux.HandleFunc("GET /enqueue", h.enqueuePage)
	mux.HandleFunc("GET /periodic", h.periodicPage)
	mux.HandleFunc("GET /ratelimits", h.rateLimitsPage)
	mux.HandleFunc("GET /audit", h.auditPage)
	mux.HandleFunc("GET /static/", h.serveStatic)
	for path, action := range h.actions() {
		mux.HandleFunc("POST "+path, action)
	}
	return mux
}

// actions are the POST endpoints, each a change.
func (h *handler) actions() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"/enqueue":                   h.enqueue,
		"/tasks/{id}/run-now":        h.runNow,
		"/tasks/{id}/delete":         h.deleteOne,
		"/tasks/{id}/requeue":        h.requeueOne,
		"/tasks/{id}/cancel":         h.cancelOne,
		"/tasks/{id}/cancel-running": h.cancelRunning,
		"/requeue":                   h.requeueMany,
		"/cancel":                    h.cancelMany,
		"/queues/{name}/pause":       h.pause,
		"/queues/{name}/resume":      h.resume,
		"/schedules/pause":           h.scheduleChange(queue.AuditSchedulePause),
		"/schedules/resume":          h.scheduleChange(queue.AuditScheduleResume),
		"/schedules/remove":          h.scheduleChange(queue.AuditScheduleRemove),
	}
}

// ServeHTTP sets the security headers, refuses a POST in read-only mode or
// without the CSRF token, and routes the request.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")

	if r.Method == http.MethodPost {
		if h.opts.ReadOnly {
			http.Error(w, "403 forbidden: this dashboard is read-only", http.StatusForbidden)
			return
		}
		if err := h.checkCSRF(r); err != nil {
			http.Error(w, "403 forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
	}
	if !strings.HasPrefix(r.URL.Path, "/static/") {
		hd.Set("Cache-Control", "no-store")
	}
	h.routes.ServeHTTP(w, r)
}

func (h *handler) serveStatic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=300")
	h.static.ServeHTTP(w, r)
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// csrfCookie carries the CSRF token, so that a POST must show it twice: in
// the form (which only our pages hold) and in a cookie that SameSite keeps
// from cross-site requests.
const csrfCookie = "skiplock_csrf"

func (h *handler) checkCSRF(r *http.Request) error {
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
	if !equal(r.PostFormValue("csrf"), h.csrf) {
		return errors.New("missing or wrong CSRF token; reload the page and try again")
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || !equal(c.Value, h.csrf) {
		return errors.New("missing CSRF cookie; reload the page and try again")
	}
	return nil
}

// cookiePath is the Path of the dashboard's cookies: its own pages only.
func (h *handler) cookiePath() string { return h.opts.Prefix + "/" }

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
