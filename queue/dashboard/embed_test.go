package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

// links matches every URL a page points at: links, forms, buttons' form
// actions, scripts and styles.
var links = regexp.MustCompile(`\b(href|action|formaction|src)="([^"]*)"`)

// pagePaths are the pages of a seeded schema, under the mount point.
func pagePaths(task, workflow int64, sequence string) []string {
	return []string{"/", "/tasks", "/tasks?queue=mail&status=failed", fmt.Sprintf("/tasks/%d", task), "/failed", "/locks",
		"/periodic", "/ratelimits", "/audit", fmt.Sprintf("/workflows/%d", workflow), "/sequence?key=" + url.QueryEscape(sequence),
		"/tasks/999999"}
}

// seedPages enqueues what every page shows something of: a failed task, a
// workflow, a sequence, 60 tasks (two pages), an audit record.
func seedPages(t *testing.T, b *bundle) (task, workflow int64, sequence string) {
	t.Helper()
	ctx := context.Background()
	task = b.insert(t, "mail", "email.send", queue.StatusFailed, `{"to": "ada@example.com"}`, failure("smtp: 421"), time.Minute)
	if _, err := b.pool.Exec(ctx, `INSERT INTO skiplock_tasks (queue, name) SELECT 'mail', 'email.send' FROM generate_series(1, 60)`); err != nil {
		t.Fatal(err)
	}
	enq := seedWorkflow(t, b)
	key, _ := seedSequence(t, b)
	if err := b.client.PauseQueue(ctx, "mail"); err != nil {
		t.Fatal(err)
	}
	return task, enq.ID, key
}

// TestPrefix mounts the dashboard under /admin/jobs: every page renders,
// and every link, form, asset, redirect and cookie stays under the prefix.
func TestPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{Prefix: "/admin/jobs"})
	task, workflow, key := seedPages(t, b)
	origin := strings.TrimSuffix(b.url, "/admin/jobs")
	c := browserless(t)
	var csrf string
	for _, path := range append(pagePaths(task, workflow, key), "/enqueue", "/tasks?before=1000000") {
		code, body := get(t, c, b.url+path)
		if want := http.StatusOK; path == "/tasks/999999" {
			if code != http.StatusNotFound {
				t.Errorf("GET %s: %d, want 404", path, code)
			}
		} else if code != want {
			t.Errorf("GET %s: %d, want %d\n%s", path, code, want, body)
		}
		found := links.FindAllStringSubmatch(body, -1)
		if len(found) < 3 {
			t.Errorf("GET %s: %d links", path, len(found))
		}
		for _, m := range found {
			u := html.UnescapeString(m[2])
			if !strings.HasPrefix(u, "/admin/jobs/") && !strings.HasPrefix(u, "?") {
				t.Errorf("GET %s: %s=%q leaves /admin/jobs/", path, m[1], u)
			}
		}
		if m := csrfField.FindStringSubmatch(body); m != nil {
			csrf = m[1]
		}
	}
	// The assets the pages name are served there.
	for _, asset := range []string{"/static/style.css", "/static/app.js"} {
		if code, _ := get(t, c, b.url+asset); code != http.StatusOK {
			t.Errorf("GET %s: %d", asset, code)
		}
	}
	// The cookies are the dashboard's own.
	resp, err := c.Get(b.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Path != "/admin/jobs/" {
			t.Errorf("cookie %s has path %q", ck.Name, ck.Path)
		}
	}
	// Redirects after an action: back where the form was, under the
	// prefix; never out of it.
	for back, want := range map[string]string{
		"/tasks?queue=mail":   "/admin/jobs/tasks?queue=mail",
		"/../../elsewhere":    "/admin/jobs/",
		"//attacker.example/": "/admin/jobs/",
		"https://x.example/":  "/admin/jobs/",
		"/\\attacker.example": "/admin/jobs/",
	} {
		resp, err := c.PostForm(b.url+"/queues/mail/resume", url.Values{"csrf": {csrf}, "back": {back}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != want {
			t.Errorf("back %q: %s to %q, want 303 to %q", back, resp.Status, loc, want)
		}
	}
	// Deleting a task sends the browser to the list, under the prefix.
	resp, err = c.PostForm(fmt.Sprintf("%s/tasks/%d/delete", b.url, task), url.Values{"csrf": {csrf}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); loc != "/admin/jobs/tasks" {
		t.Errorf("after a delete: redirected to %q", loc)
	}
	if code, _ := get(t, c, origin+"/tasks"); code != http.StatusNotFound {
		t.Errorf("GET /tasks outside the prefix: %d, want 404", code)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	c := queue.New(pgtest.Pool(t))
	for _, opts := range []dashboard.Options{
		{Prefix: "admin"}, {Prefix: "/admin/"}, {Prefix: "/"}, {Prefix: "/a//b"}, {Prefix: "/a/../b"}, {Prefix: "/a b"},
		{Prefix: "/a?x=1"}, {CSRFToken: "short"},
	} {
		if _, err := dashboard.New(c, opts); err == nil {
			t.Errorf("New(%+v) accepted", opts)
		}
	}
	if _, err := dashboard.New(nil, dashboard.Options{}); err == nil {
		t.Error("New without a client accepted")
	}
}

// Two replicas that share a CSRF token accept each other's forms.
func TestSharedCSRFToken(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{CSRFToken: strings.Repeat("5a", 20)})
	b.insert(t, "mail", "a", queue.StatusPending, "", "", 0)
	other, err := dashboard.New(b.client, dashboard.Options{CSRFToken: strings.Repeat("5a", 20), Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	c := browserless(t)
	_, body := get(t, c, b.url+"/")
	token := csrfField.FindStringSubmatch(body)[1]
	req := httptest.NewRequest(http.MethodPost, "/queues/mail/pause", strings.NewReader(url.Values{"csrf": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	u, _ := url.Parse(b.url)
	for _, ck := range c.Jar.Cookies(u) {
		req.AddCookie(ck)
	}
	rec := httptest.NewRecorder()
	other.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther || !b.paused(t)["mail"] {
		t.Fatalf("the other replica answered %d; paused %v", rec.Code, b.paused(t))
	}
}

// forgeries are a POST to every action endpoint, each of which would
// change something in the schema that seedActions makes.
func forgeries(ids actionIDs) map[string]url.Values {
	return map[string]url.Values{
		"/enqueue": {"name": {"forged"}},
		fmt.Sprintf("/tasks/%d/run-now", ids.scheduled):      {},
		fmt.Sprintf("/tasks/%d/delete", ids.completed):       {},
		fmt.Sprintf("/tasks/%d/requeue", ids.failed[0]):      {},
		fmt.Sprintf("/tasks/%d/cancel", ids.pending):         {},
		fmt.Sprintf("/tasks/%d/cancel-running", ids.running): {},
		"/requeue":              {"id": {fmt.Sprint(ids.failed[1])}},
		"/cancel":               {"scope": {"filter"}, "queue": {"mail"}},
		"/queues/mail/pause":    {},
		"/queues/paused/resume": {},
		"/schedules/pause":      {"schedule": {"nightly"}},
		"/schedules/resume":     {"schedule": {"held"}},
		"/schedules/remove":     {"schedule": {"doomed"}},
	}
}

type actionIDs struct {
	scheduled, completed, pending, running int64
	failed                                 []int64
}

// seedActions makes a task for each action to change.
func seedActions(t *testing.T, b *bundle) actionIDs {
	t.Helper()
	ids := actionIDs{
		scheduled: b.insert(t, "other", "a", queue.StatusPending, "", "", 0),
		completed: b.insert(t, "other", "a", queue.StatusCompleted, "", "", time.Minute),
		pending:   b.insert(t, "other", "a", queue.StatusPending, "", "", 0),
		running:   b.insert(t, "other", "a", queue.StatusRunning, "", "", 0),
		failed: []int64{b.insert(t, "other", "a", queue.StatusFailed, "", failure("x"), time.Minute),
			b.insert(t, "other", "a", queue.StatusFailed, "", failure("x"), time.Minute)},
	}
	b.insert(t, "mail", "a", queue.StatusFailed, "", failure("x"), time.Minute)
	b.insert(t, "paused", "a", queue.StatusPending, "", "", 0)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `UPDATE skiplock_tasks SET run_at = now() + interval '1 hour' WHERE id = $1`, ids.scheduled); err != nil {
		t.Fatal(err)
	}
	if err := b.client.PauseQueue(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []queue.Schedule{
		{Name: "nightly", Cron: "0 3 * * *", Task: "report"},
		{Name: "held", Every: time.Hour, Task: "report", Paused: true},
		{Name: "doomed", Every: time.Hour, Task: "report"},
	} {
		if err := b.client.AddSchedule(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// snapshot is what the actions would change: every task's status and run
// time, the paused queues, the pending cancel requests, the audit trail.
func snapshot(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	err := pool.QueryRow(context.Background(), `SELECT concat_ws(' | ',
		(SELECT string_agg(id || ':' || status || ':' || (run_at > now()) || ':' || (cancel_requested_at IS NOT NULL), ',' ORDER BY id) FROM skiplock_tasks),
		(SELECT string_agg(name, ',' ORDER BY name) FROM skiplock_queues WHERE paused_at IS NOT NULL),
		(SELECT string_agg(name || ':' || (paused_at IS NOT NULL), ',' ORDER BY name) FROM skiplock_schedules),
		(SELECT count(*) FROM skiplock_audit WHERE source = 'dashboard'))`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReadOnly: no action is shown on any page, and a POST to each action
// endpoint, even with a CSRF token, is refused and changes nothing.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{ReadOnly: true, Prefix: "/ops"})
	task, workflow, key := seedPages(t, b)
	ids := seedActions(t, b)
	c := browserless(t)
	for _, path := range append(pagePaths(task, workflow, key), fmt.Sprintf("/tasks/%d", ids.failed[0]),
		fmt.Sprintf("/tasks/%d", ids.scheduled), fmt.Sprintf("/tasks/%d", ids.running)) {
		_, body := get(t, c, b.url+path)
		for _, action := range []string{`method="post"`, `name="csrf"`, `/enqueue"`, `type="checkbox"`} {
			if strings.Contains(body, action) {
				t.Errorf("read-only GET %s shows %s", path, action)
			}
		}
	}
	if code, _ := get(t, c, b.url+"/enqueue"); code != http.StatusForbidden {
		t.Errorf("read-only GET /enqueue: %d, want 403", code)
	}
	before := snapshot(t, b.pool)
	for path, form := range forgeries(ids) {
		form.Set("csrf", strings.Repeat("0", 64))
		resp, err := c.PostForm(b.url+path, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("read-only POST %s: %s, want 403", path, resp.Status)
		}
	}
	if after := snapshot(t, b.pool); after != before {
		t.Fatalf("read-only POSTs changed the schema:\nbefore %s\nafter  %s", before, after)
	}
}

// TestAuthorize: a hook that refuses an action gets 403 and nothing
// changes; one that allows records the actor it returns; it sees what
// each action would do.
func TestAuthorize(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []dashboard.Action
	allow := map[string]string{} // by user: the actor to return
	b := setup(t, dashboard.Options{Authorize: func(r *http.Request, a dashboard.Action) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, a)
		user := r.Header.Get("X-User")
		if actor, ok := allow[user]; ok {
			return actor, nil
		}
		return "", fmt.Errorf("%s may not %s", user, a)
	}})
	ids := seedActions(t, b)
	c := browserless(t)
	_, body := get(t, c, b.url+"/")
	token := csrfField.FindStringSubmatch(body)[1]
	post := func(user, path string, form url.Values) (int, string) {
		t.Helper()
		f := url.Values{"csrf": {token}}
		for k, v := range form {
			f[k] = v
		}
		req, _ := http.NewRequest(http.MethodPost, b.url+path, strings.NewReader(f.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-User", user)
		resp, err := c.Do(req)
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

	before := snapshot(t, b.pool)
	for path, form := range forgeries(ids) {
		if code, body := post("mallory", path, form); code != http.StatusForbidden || !strings.Contains(body, "mallory may not") {
			t.Errorf("refused POST %s: %d\n%s", path, code, body)
		}
	}
	if after := snapshot(t, b.pool); after != before {
		t.Fatalf("refused actions changed the schema:\nbefore %s\nafter  %s", before, after)
	}
	kinds := map[queue.AuditAction]dashboard.Action{}
	var bulk *dashboard.Action
	mu.Lock()
	for _, a := range seen {
		kinds[a.Kind] = a
		if a.Kind == queue.AuditCancel && a.Filter != nil {
			bulk = &a
		}
	}
	mu.Unlock()
	if len(kinds) != 11 {
		t.Errorf("the hook saw %d kinds of action, want 11: %+v", len(kinds), seen)
	}
	if a := kinds[queue.AuditScheduleRemove]; a.Schedule != "doomed" || a.String() != "schedule-remove schedule doomed" {
		t.Errorf("a schedule removal reached the hook as %+v (%s)", a, a)
	}
	if bulk == nil || !slices.Equal(bulk.Filter.Queues, []string{"mail"}) || bulk.String() != "cancel every matching task" {
		t.Errorf("a cancel of every matching task reached the hook as %+v", bulk)
	}
	if a := kinds[queue.AuditEnqueue]; a.Task != "forged" || a.Queue != queue.DefaultQueue {
		t.Errorf("an enqueue reached the hook as %+v", a)
	}
	if a := kinds[queue.AuditRunNow]; !slices.Equal(a.IDs, []int64{ids.scheduled}) {
		t.Errorf("a run now reached the hook as %+v", a)
	}

	// Allowed: each action is done and recorded with the hook's actor.
	mu.Lock()
	allow["alice"] = "alice@example.com"
	allow["bob"] = "" // allowed, nobody named
	mu.Unlock()
	for path, form := range forgeries(ids) {
		if code, body := post("alice", path, form); code != http.StatusSeeOther {
			t.Errorf("allowed POST %s: %d\n%s", path, code, body)
		}
	}
	if code, _ := post("bob", "/queues/other/pause", nil); code != http.StatusSeeOther {
		t.Errorf("bob's pause: %d", code)
	}
	records, err := b.client.AuditLog(context.Background(), queue.AuditFilter{Source: queue.SourceDashboard})
	if err != nil {
		t.Fatal(err)
	}
	actors := map[string]int{}
	actions := map[queue.AuditAction]bool{}
	for _, r := range records {
		actors[r.Actor]++
		actions[r.Action] = true
	}
	if actors["alice@example.com"] != 13 || actors[dashboard.DefaultActor] != 1 || len(actions) != 11 {
		t.Fatalf("dashboard records by actor %v, actions %v", actors, actions)
	}
	if after := snapshot(t, b.pool); after == before {
		t.Fatal("allowed actions changed nothing")
	}
}

// TestAuditPage lists the audit trail, the newest first, and filters it.
func TestAuditPage(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	b.insert(t, "mail", "a", queue.StatusPending, "", "", 0)
	ctx := context.Background()
	if err := b.client.PauseQueue(queue.WithActor(ctx, queue.Actor{Name: "<b>alice</b>", Source: queue.SourceCLI}), "mail"); err != nil {
		t.Fatal(err)
	}
	if err := b.client.ResumeQueue(ctx, "mail"); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, http.DefaultClient, b.url+"/audit")
	pause, resume := strings.Index(body, "<td>pause</td>"), strings.Index(body, "<td>resume</td>")
	if code != http.StatusOK || pause < 0 || resume < 0 || resume > pause || !strings.Contains(body, "&lt;b&gt;alice&lt;/b&gt;") ||
		!strings.Contains(body, "<td>cli</td>") || !strings.Contains(body, `{&#34;queue&#34;:&#34;mail&#34;}`) {
		t.Fatalf("GET /audit: %d\n%s", code, body)
	}
	_, body = get(t, http.DefaultClient, b.url+"/audit?action=resume")
	if strings.Contains(body, "<td>pause</td>") || !strings.Contains(body, "<td>resume</td>") {
		t.Fatalf("GET /audit?action=resume:\n%s", body)
	}
	if code, _ := get(t, http.DefaultClient, b.url+"/audit?action=nap"); code != http.StatusBadRequest {
		t.Errorf("unknown action: %d, want 400", code)
	}
}

// secret is a database password that no page may show.
const secret = "hunter2-S3cret"

// TestNoPasswordInPages: neither the pages of a dashboard connected with a
// password nor its error page when the database is down show it.
func TestNoPasswordInPages(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t, true)
	cfg := pgtest.Config(t, schema)
	cfg.ConnConfig.Password = secret // trust authentication ignores it
	pool := pgtest.PoolFromConfig(t, cfg)
	b := &bundle{pool: pool, client: queue.New(pool)}
	h, err := dashboard.New(b.client, dashboard.Options{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	b.url = srv.URL
	task, workflow, key := seedPages(t, b)
	for _, path := range pagePaths(task, workflow, key) {
		if _, body := get(t, http.DefaultClient, b.url+path); strings.Contains(body, secret) {
			t.Errorf("GET %s shows the password", path)
		}
	}

	// A database that cannot be reached, through a URL with the password.
	down, err := pgxpool.New(context.Background(), "postgres://app:"+secret+"@127.0.0.1:1/app?connect_timeout=2&password="+secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	h, err = dashboard.New(queue.New(down), dashboard.Options{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/tasks", "/audit", "/failed"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusInternalServerError || strings.Contains(rec.Body.String(), secret) {
			t.Errorf("GET %s with the database down: %d\n%s", path, rec.Code, rec.Body.String())
		}
	}
}
