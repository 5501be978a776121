package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/ops"
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
}

// setup serves the dashboard of a fresh schema until the test ends:
// mounted under opts.Prefix with http.StripPrefix, as the package doc says.
func setup(t *testing.T, opts dashboard.Options) *bundle {
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
	mux := http.NewServeMux()
	mux.Handle(opts.Prefix+"/", http.StripPrefix(opts.Prefix, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
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

// get fetches path with c and returns the status and body.
func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// browserless is an HTTP client that keeps cookies and does not follow
// redirects.
func browserless(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func TestCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	b.insert(t, "mail", "a", queue.StatusPending, "", "", 0)
	c := browserless(t)
	code, body := get(t, c, b.url+"/")
	m := csrfField.FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		t.Fatalf("GET /: %d, CSRF field found: %v", code, m != nil)
	}
	token := m[1]
	pause := b.url + "/queues/mail/pause"

	post := func(c *http.Client, form url.Values, header map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, pause, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, x := range []struct {
		name   string
		client *http.Client
		form   url.Values
		header map[string]string
	}{
		{"no token", c, url.Values{}, nil},
		{"wrong token", c, url.Values{"csrf": {strings.Repeat("0", len(token))}}, nil},
		{"token without its cookie", browserless(t), url.Values{"csrf": {token}}, nil},
		{"another origin", c, url.Values{"csrf": {token}}, map[string]string{"Origin": "http://attacker.example"}},
		{"opaque origin", c, url.Values{"csrf": {token}}, map[string]string{"Origin": "null"}},
		{"cross-site fetch", c, url.Values{"csrf": {token}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		if got := post(x.client, x.form, x.header); got != http.StatusForbidden {
			t.Errorf("POST with %s: %d, want 403", x.name, got)
		}
	}
	paused, err := ops.PausedQueues(context.Background(), b.client)
	if err != nil || len(paused) != 0 {
		t.Fatalf("queues paused by refused requests: %v (%v)", paused, err)
	}

	// The real thing: same origin, token in the form and the cookie. A
	// "back" that points off the site is ignored.
	code = post(c, url.Values{"csrf": {token}, "back": {"//attacker.example/"}},
		map[string]string{"Origin": b.url, "Sec-Fetch-Site": "same-origin"})
	if code != http.StatusSeeOther {
		t.Fatalf("POST with the token: %d, want 303", code)
	}
	paused, err = ops.PausedQueues(context.Background(), b.client)
	if err != nil || len(paused) != 1 || paused[0].Name != "mail" {
		t.Fatalf("paused queues = %v (%v), want mail", paused, err)
	}
}

func TestRedirectStaysOnSite(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	b.insert(t, "q", "a", queue.StatusPending, "", "", 0)
	c := browserless(t)
	_, body := get(t, c, b.url+"/")
	token := csrfField.FindStringSubmatch(body)[1]
	for back, want := range map[string]string{
		"//attacker.example/": "/",
		"/\\attacker.example": "/",
		"https://x.example/":  "/",
		"/tasks?queue=mail":   "/tasks?queue=mail",
	} {
		resp, err := c.PostForm(b.url+"/queues/q/resume", url.Values{"csrf": {token}, "back": {back}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); loc != want {
			t.Errorf("back %q: redirected to %q, want %q", back, loc, want)
		}
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	id := b.insert(t, "default", "a", queue.StatusPending, "", "", 0)
	for _, path := range []string{"/", "/tasks", fmt.Sprintf("/tasks/%d", id), "/failed", "/locks", "/tasks/999999"} {
		resp, err := http.Get(b.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: headers %v", path, h)
		}
		if want := http.StatusOK; path == "/tasks/999999" {
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s: %s, want 404", path, resp.Status)
			}
		} else if resp.StatusCode != want {
			t.Errorf("%s: %s, want %d", path, resp.Status, want)
		}
	}
}

func TestPagination(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	_, err := b.pool.Exec(context.Background(),
		`INSERT INTO skiplock_tasks (queue, name, status) SELECT 'q', 'n' || (i % 3), 'pending' FROM generate_series(1, 120) AS i`)
	if err != nil {
		t.Fatal(err)
	}
	b.insert(t, "other", "n0", queue.StatusFailed, "", failure("nope"), time.Minute)
	row := regexp.MustCompile(`<td class="n"><a href="/tasks/(\d+)">`)
	next := regexp.MustCompile(`<a href="([^"]+)" rel="next">`)

	seen := map[string]bool{}
	u := b.url + "/tasks?queue=q"
	var sizes []int
	for u != "" {
		code, body := get(t, http.DefaultClient, u)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", u, code, body)
		}
		ids := row.FindAllStringSubmatch(body, -1)
		sizes = append(sizes, len(ids))
		prev := int64(1 << 62)
		for _, m := range ids {
			if seen[m[1]] {
				t.Fatalf("task %s on two pages", m[1])
			}
			seen[m[1]] = true
			var id int64
			fmt.Sscan(m[1], &id)
			if id >= prev {
				t.Fatalf("page %s not newest first: %d after %d", u, id, prev)
			}
			prev = id
		}
		u = ""
		if m := next.FindStringSubmatch(body); m != nil {
			u = b.url + strings.ReplaceAll(m[1], "&amp;", "&")
			if !strings.Contains(u, "queue=q") || !strings.Contains(u, "before=") {
				t.Fatalf("next page link %q lost the filter or has no cursor", u)
			}
		}
	}
	if fmt.Sprint(sizes) != "[50 50 20]" || len(seen) != 120 {
		t.Fatalf("pages of %v (%d tasks), want [50 50 20] and 120", sizes, len(seen))
	}

	// Filters: name, status, search by ID and by error text.
	for q, want := range map[string]int{
		"/tasks?queue=q&name=n1":            40,
		"/tasks?status=failed":              1,
		"/tasks?q=nope":                     1,
		"/failed?queue=other":               1,
		"/failed?queue=q":                   0,
		"/tasks?status=pending&q=%23" + "1": 1,
	} {
		code, body := get(t, http.DefaultClient, b.url+q)
		if n := len(row.FindAllString(body, -1)); code != http.StatusOK || n != min(want, dashboard.PageSize) {
			t.Errorf("GET %s: %d with %d rows, want %d", q, code, n, want)
		}
	}
	if code, _ := get(t, http.DefaultClient, b.url+"/tasks?status=bogus"); code != http.StatusBadRequest {
		t.Errorf("unknown status: %d, want 400", code)
	}
	if code, _ := get(t, http.DefaultClient, b.url+"/tasks?before=x"); code != http.StatusBadRequest {
		t.Errorf("bad cursor: %d, want 400", code)
	}
}

// hostile is a payload that runs script if it is not escaped.
const hostile = `{"x": "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>"}`

func TestEscaping(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	id := b.insert(t, "<b>q</b>", "<i>name</i>", queue.StatusFailed, hostile, failure(`<script>alert("err")</script>`), time.Minute)
	for _, path := range []string{fmt.Sprintf("/tasks/%d", id), "/tasks", "/failed", "/"} {
		code, body := get(t, http.DefaultClient, b.url+path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		for _, raw := range []string{"<script>window", "<img src=x", "<b>q</b>", "<i>name</i>", `<script>alert`} {
			if strings.Contains(body, raw) {
				t.Errorf("GET %s: %q is in the page unescaped", path, raw)
			}
		}
		// One database's failed page offers its bulk changes, with no
		// word of shards.
		if path == "/failed" && (!strings.Contains(body, "<h1>Failed tasks</h1>") || !strings.Contains(body, `id="bulk"`) ||
			!strings.Contains(body, "on every page?") || strings.Contains(body, "shard")) {
			t.Errorf("GET /failed: no bulk forms, or a word of shards:\n%s", body)
		}
	}
	_, body := get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", b.url, id))
	if !strings.Contains(body, "&lt;script&gt;window.__pwned=1&lt;/script&gt;&lt;img src=x onerror=window.__pwned=2&gt;") {
		t.Errorf("the payload is not shown as text:\n%s", body)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// The new write actions keep the protections of the old ones: without the
// CSRF token they change nothing; with it, they work.
func TestNewActionsNeedCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	waiting := b.insert(t, "mail", "a", queue.StatusPending, "", "", 0)
	if _, err := b.pool.Exec(context.Background(), `UPDATE skiplock_tasks SET run_at = now() + interval '1 hour' WHERE id = $1`, waiting); err != nil {
		t.Fatal(err)
	}
	doomed := b.insert(t, "mail", "a", queue.StatusCompleted, "", "", time.Minute)
	c := browserless(t)
	_, body := get(t, c, b.url+"/enqueue")
	token := csrfField.FindStringSubmatch(body)[1]
	forms := map[string]url.Values{
		"/enqueue": {"name": {"forged"}},
		fmt.Sprintf("/tasks/%d/run-now", waiting): {},
		fmt.Sprintf("/tasks/%d/delete", doomed):   {},
		"/queues/phantom/pause":                   {},
	}
	for path, form := range forms {
		for _, x := range []struct {
			name   string
			client *http.Client
			csrf   string
		}{{"no token", c, ""}, {"token without its cookie", browserless(t), token}} {
			f := url.Values{"csrf": {x.csrf}}
			for k, v := range form {
				f[k] = v
			}
			resp, err := x.client.PostForm(b.url+path, f)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("POST %s with %s: %s, want 403", path, x.name, resp.Status)
			}
		}
	}
	var forged, due, left int
	err := b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM skiplock_tasks WHERE name = 'forged'),
		(SELECT count(*) FROM skiplock_tasks WHERE id = $1 AND run_at <= now()),
		(SELECT count(*) FROM skiplock_tasks WHERE id = $2)`, waiting, doomed).Scan(&forged, &due, &left)
	if err != nil || forged != 0 || due != 0 || left != 1 {
		t.Fatalf("refused posts changed things: forged %d, due %d, deleted task left %d (%v)", forged, due, left, err)
	}
	// With the token: each works, and pausing an unknown queue is refused.
	for path, form := range forms {
		form.Set("csrf", token)
		resp, err := c.PostForm(b.url+path, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("POST %s with the token: %s, want 303", path, resp.Status)
		}
	}
	err = b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM skiplock_tasks WHERE name = 'forged'),
		(SELECT count(*) FROM skiplock_tasks WHERE id = $1 AND run_at <= now()),
		(SELECT count(*) FROM skiplock_tasks WHERE id = $2)`, waiting, doomed).Scan(&forged, &due, &left)
	if err != nil || forged != 1 || due != 1 || left != 0 {
		t.Fatalf("with the token: enqueued %d, due %d, deleted task left %d (%v)", forged, due, left, err)
	}
	if paused := b.paused(t); paused["phantom"] {
		t.Fatal("the dashboard paused a queue that has no tasks")
	}
}

func (b *bundle) paused(t *testing.T) map[string]bool {
	t.Helper()
	ps, err := ops.PausedQueues(context.Background(), b.client)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range ps {
		out[p.Name] = true
	}
	return out
}

// TestPeriodicPageStoredSchedules: the Periodic page lists the stored
// schedules with their actions; pause, resume and remove work, are
// recorded in the audit trail, and an unknown schedule changes nothing.
func TestPeriodicPageStoredSchedules(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	ctx := context.Background()
	if err := b.client.AddSchedule(ctx, queue.Schedule{Name: "nightly <report>", Cron: "0 3 * * *", Task: "report.build", Queue: "reports"}); err != nil {
		t.Fatal(err)
	}
	c := browserless(t)
	code, body := get(t, c, b.url+"/periodic")
	for _, want := range []string{"nightly &lt;report&gt;", "0 3 * * *", "report.build", "reports", `action="/schedules/pause"`, `action="/schedules/remove"`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("GET /periodic: %d, lacks %q\n%s", code, want, body)
		}
	}
	token := csrfField.FindStringSubmatch(body)[1]
	post := func(path, name string) {
		t.Helper()
		resp, err := c.PostForm(b.url+path, url.Values{"csrf": {token}, "schedule": {name}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("POST %s: %s", path, resp.Status)
		}
	}
	post("/schedules/pause", "nightly <report>")
	if s, err := b.client.GetSchedule(ctx, "nightly <report>"); err != nil || !s.Paused {
		t.Fatalf("after pause: %+v, %v", s, err)
	}
	if _, body := get(t, c, b.url+"/periodic"); !strings.Contains(body, `action="/schedules/resume"`) || !strings.Contains(body, "badge paused") {
		t.Fatalf("paused schedule shown without its resume:\n%s", body)
	}
	post("/schedules/resume", "nightly <report>")
	post("/schedules/remove", "ghost") // unknown: nothing changes
	if _, body := get(t, c, b.url+"/periodic"); !strings.Contains(body, "No stored schedule ghost; nothing was changed.") {
		t.Errorf("no message for an unknown schedule:\n%s", body)
	}
	post("/schedules/remove", "nightly <report>")
	if got, err := b.client.Schedules(ctx); err != nil || len(got) != 0 {
		t.Fatalf("after remove: %+v, %v", got, err)
	}
	records, err := b.client.AuditLog(ctx, queue.AuditFilter{Source: queue.SourceDashboard})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, r := range records {
		actions = append(actions, string(r.Action))
	}
	if strings.Join(actions, " ") != "schedule-remove schedule-resume schedule-pause" {
		t.Errorf("dashboard audit records: %v", actions)
	}
}
