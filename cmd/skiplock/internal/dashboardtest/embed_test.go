package dashboardtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

// The dashboard embedded in an application: mounted under /admin/jobs,
// behind the application's own login.

const prefix = "/admin/jobs"

type userKey struct{}

// requireUser is the application's login as a test stands it in: a
// session cookie names the user, who goes into the request's context; no
// cookie, no dashboard.
func requireUser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("session")
		if err != nil || c.Value == "" {
			http.Error(w, "401 unauthorized: log in first", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, c.Value)))
	})
}

// userOf is the user requireUser found.
func userOf(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}

// login opens the application as user: its session cookie, then the
// dashboard's first page.
func login(t *testing.T, ctx context.Context, b *bundle, user string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(b.origin+"/"))
	eval[string](t, ctx, fmt.Sprintf(`document.cookie = "session=%s; path=/"`, user))
	do(t, ctx, chromedp.Navigate(b.url+"/"), chromedp.WaitVisible(chromedp.CSS("h1")))
}

// offPrefix returns the URLs of the page (links, forms, buttons' form
// actions, scripts, styles) whose path is not under the prefix.
func offPrefix(t *testing.T, ctx context.Context) []string {
	t.Helper()
	return eval[[]string](t, ctx, `[...document.querySelectorAll("a[href], form[action], button[formaction], link[href], script[src]")]
		.map(e => new URL(e.getAttribute("href") ?? e.getAttribute("action") ?? e.getAttribute("formaction") ?? e.getAttribute("src"), location.href))
		.filter(u => u.origin !== location.origin || !u.pathname.startsWith("`+prefix+`/"))
		.map(u => u.href)`)
}

// seedEmbedded gives every page something to show: a failed task with its
// history, a workflow, a sequence, a paused queue, two pages of tasks. It
// returns the failed task and the pages of the workflow and the sequence.
func seedEmbedded(t *testing.T, b *bundle) (failed int64, more []string) {
	t.Helper()
	failed = b.insert(t, "mail", "email.send", queue.StatusFailed, `{"to": "ada@example.com"}`, failure("smtp: 421"), time.Minute)
	if _, err := b.pool.Exec(context.Background(), `INSERT INTO skiplock_tasks (queue, name) SELECT 'reports', 'report.build' FROM generate_series(1, 60)`); err != nil {
		t.Fatal(err)
	}
	wf := seedWorkflow(t, b)
	_, seq := seedSequence(t, b)
	if err := b.client.PauseQueue(context.Background(), "reports"); err != nil {
		t.Fatal(err)
	}
	return failed, []string{fmt.Sprintf("%s/tasks/%d", b.url, failed), fmt.Sprintf("%s/tasks/%d", b.url, wf.TaskIDs["publish"]),
		fmt.Sprintf("%s/tasks/%d", b.url, seq[2])}
}

// TestBrowserEmbedded mounts the dashboard under /admin/jobs behind the
// application's login: every page renders with its script and styles, every
// link, form and asset stays under the prefix, following them leads to
// more pages under it, and an action is recorded in the audit trail as
// made by the logged-in user.
func TestBrowserEmbedded(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	b := setup(t, dashboard.Options{Prefix: prefix, Refresh: -1, Authorize: func(r *http.Request, _ dashboard.Action) (string, error) {
		return userOf(r), nil
	}}, requireUser)
	failed, more := seedEmbedded(t, b)
	do(t, ctx, chromedp.Navigate(b.url+"/"))
	if got := eval[string](t, ctx, `document.body.textContent`); !strings.Contains(got, "log in first") {
		t.Fatalf("the dashboard answered before the login: %q", got)
	}
	login(t, ctx, b, "alice")

	// Every page the navigation leads to, a task of each kind, and the
	// pages their links lead to.
	pages := eval[[]string](t, ctx, `[...document.querySelectorAll("header a")].map(a => a.href)`)
	pages = append(pages, more...)
	if len(pages) < 8+len(more) {
		t.Fatalf("the navigation has %d links: %v", len(pages), pages)
	}
	seen := map[string]bool{}
	for i := 0; i < len(pages) && len(seen) < 30; i++ {
		u := pages[i]
		if seen[u] {
			continue
		}
		seen[u] = true
		do(t, ctx, chromedp.Navigate(u), chromedp.WaitVisible(chromedp.CSS("h1")))
		waitJS(t, ctx, "the page's script", `document.documentElement.dataset.js === "ready"`)
		if !eval[bool](t, ctx, `[...document.styleSheets].some(s => s.href && s.href.endsWith("`+prefix+`/static/style.css") && s.cssRules.length > 10)`) {
			t.Errorf("%s: the stylesheet is not loaded", u)
		}
		if code := eval[string](t, ctx, `document.querySelector("h1").textContent`); strings.HasPrefix(code, "4") || strings.HasPrefix(code, "5") {
			t.Errorf("%s: %s", u, code)
		}
		if off := offPrefix(t, ctx); len(off) > 0 {
			t.Errorf("%s links out of %s: %v", u, prefix, off)
		}
		// Links to tasks, workflows, sequences and filtered lists.
		for _, next := range eval[[]string](t, ctx, `[...document.querySelectorAll("main a[href]")].map(a => a.href).slice(0, 6)`) {
			if !seen[next] {
				pages = append(pages, next)
			}
		}
	}
	for _, want := range []string{"/tasks/", "/workflows/", "/sequence?key=", "/failed", "/audit", "/enqueue", "/locks"} {
		found := false
		for u := range seen {
			found = found || strings.Contains(u, prefix+want)
		}
		if !found {
			t.Errorf("no page of %s visited; visited %d pages", want, len(seen))
		}
	}

	// An action: the redirect and the message stay under the prefix, and
	// the audit trail names the user.
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", b.url, failed)), chromedp.WaitVisible(chromedp.CSS(`form[action$="/requeue"]`)))
	do(t, ctx, chromedp.Click(chromedp.CSS(`form[action$="/requeue"] button`), chromedp.NodeVisible))
	waitFlash(t, ctx, fmt.Sprintf("Requeued task %d.", failed))
	if got := eval[string](t, ctx, `location.pathname`); got != fmt.Sprintf("%s/tasks/%d", prefix, failed) {
		t.Errorf("after the requeue the browser is at %s", got)
	}
	do(t, ctx, chromedp.Navigate(b.url+"/"), chromedp.WaitVisible(chromedp.CSS(`form[action$="/queues/reports/resume"]`)))
	do(t, ctx, chromedp.Click(chromedp.CSS(`form[action$="/queues/reports/resume"] button`), chromedp.NodeVisible))
	waitFlash(t, ctx, "Resumed queue reports.")
	records, err := b.client.AuditLog(context.Background(), queue.AuditFilter{Source: queue.SourceDashboard})
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 2 || records[0].Action != queue.AuditResume || records[1].Action != queue.AuditRequeue ||
		records[0].Actor != "alice" || records[1].Actor != "alice" || records[1].Affected != 1 {
		t.Fatalf("audit records %+v", records)
	}
	// The audit page shows them.
	do(t, ctx, chromedp.Navigate(b.url+"/audit"), chromedp.WaitVisible(chromedp.CSS("table.audit")))
	if got := eval[[]string](t, ctx, `[...document.querySelectorAll("table.audit tbody tr")].map(tr => tr.cells[2].textContent + " " + tr.cells[3].textContent + " " + tr.cells[5].textContent)`); strings.Join(got[:min(len(got), 2)], ", ") != "alice dashboard resume, alice dashboard requeue" {
		t.Errorf("the audit page lists %q", got)
	}
	screenshot(t, ctx, "audit")
}

// actionTargets makes a task or a queue for each action to change and
// returns a form for each action endpoint.
func actionTargets(t *testing.T, b *bundle) map[string]url.Values {
	t.Helper()
	scheduled := b.insert(t, "other", "a", queue.StatusPending, "", "", 0)
	if _, err := b.pool.Exec(context.Background(), `UPDATE skiplock_tasks SET run_at = now() + interval '1 hour' WHERE id = $1`, scheduled); err != nil {
		t.Fatal(err)
	}
	completed := b.insert(t, "other", "a", queue.StatusCompleted, "", "", time.Minute)
	pending := b.insert(t, "other", "a", queue.StatusPending, "", "", 0)
	running := b.insert(t, "other", "a", queue.StatusRunning, "", "", 0)
	failed := b.insert(t, "other", "a", queue.StatusFailed, "", failure("x"), time.Minute)
	failed2 := b.insert(t, "other", "a", queue.StatusFailed, "", failure("x"), time.Minute)
	b.insert(t, "mail", "a", queue.StatusFailed, "", failure("x"), time.Minute)
	b.insert(t, "paused", "a", queue.StatusPending, "", "", 0)
	if err := b.client.PauseQueue(context.Background(), "paused"); err != nil {
		t.Fatal(err)
	}
	return map[string]url.Values{
		"/enqueue": {"name": {"forged"}},
		fmt.Sprintf("/tasks/%d/run-now", scheduled):      {},
		fmt.Sprintf("/tasks/%d/delete", completed):       {},
		fmt.Sprintf("/tasks/%d/requeue", failed):         {},
		fmt.Sprintf("/tasks/%d/cancel", pending):         {},
		fmt.Sprintf("/tasks/%d/cancel-running", running): {},
		"/requeue":              {"id": {fmt.Sprint(failed2)}},
		"/cancel":               {"scope": {"filter"}, "queue": {"mail"}},
		"/queues/mail/pause":    {},
		"/queues/paused/resume": {},
	}
}

// snapshot is what the actions would change: every task's status, run
// time and cancel request, the paused queues, the audit trail.
func (b *bundle) snapshot(t *testing.T) string {
	t.Helper()
	var s string
	err := b.pool.QueryRow(context.Background(), `SELECT concat_ws(' | ',
		(SELECT string_agg(id || ':' || status || ':' || (run_at > now()) || ':' || (cancel_requested_at IS NOT NULL), ',' ORDER BY id) FROM skiplock_tasks),
		(SELECT string_agg(name, ',' ORDER BY name) FROM skiplock_queues WHERE paused_at IS NOT NULL),
		(SELECT count(*) FROM skiplock_audit))`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// forge POSTs form to the dashboard's path from the page, as a script of
// the same origin would, and returns the status.
func forge(t *testing.T, ctx context.Context, b *bundle, path string, form url.Values) int {
	t.Helper()
	body, _ := json.Marshal(form.Encode())
	js := fmt.Sprintf(`fetch(%q, {method: "POST", credentials: "same-origin", redirect: "manual",
		headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: %s}).then(r => r.status)`, prefix+path, body)
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	code, err := chromedp.Run(tctx, chromedp.Evaluate[int](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return code
}

// TestBrowserReadOnly: a read-only dashboard shows no action on any page,
// and a POST to each action endpoint, made from its own page with a valid
// CSRF token and cookie, gets 403 and changes nothing.
func TestBrowserReadOnly(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	token := strings.Repeat("c0ffee", 8)
	b := setup(t, dashboard.Options{Prefix: prefix, Refresh: -1, ReadOnly: true, CSRFToken: token}, requireUser)
	seedEmbedded(t, b)
	forms := actionTargets(t, b)
	login(t, ctx, b, "viewer")

	var ids []int64
	if err := b.pool.QueryRow(context.Background(), `SELECT array_agg(id ORDER BY id) FROM skiplock_tasks WHERE queue <> 'reports'`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	paths := []string{"/", "/tasks", "/failed", "/locks", "/periodic", "/ratelimits", "/audit"}
	for _, id := range ids {
		paths = append(paths, fmt.Sprintf("/tasks/%d", id))
	}
	for _, path := range paths {
		do(t, ctx, chromedp.Navigate(b.url+path), chromedp.WaitVisible(chromedp.CSS("h1")))
		shown := eval[[]string](t, ctx, `[...document.querySelectorAll('form[method="post"], input[type="checkbox"], a[href$="/enqueue"], button:not([type="submit"]):not(#live)')].map(e => e.outerHTML)`)
		if len(shown) > 0 {
			t.Errorf("read-only %s shows actions: %v", path, shown)
		}
		if off := offPrefix(t, ctx); len(off) > 0 {
			t.Errorf("%s links out of %s: %v", path, prefix, off)
		}
	}
	do(t, ctx, chromedp.Navigate(b.url+"/enqueue"), chromedp.WaitVisible(chromedp.CSS("h1")))
	if got := eval[string](t, ctx, `document.querySelector("h1").textContent`); !strings.HasPrefix(got, "403") {
		t.Errorf("read-only /enqueue: %q, want 403", got)
	}

	// A forgery that has everything a real form has: the token in the
	// form and in the cookie, from the same origin.
	eval[string](t, ctx, fmt.Sprintf(`document.cookie = "skiplock_csrf=%s; path=%s/"`, token, prefix))
	before := b.snapshot(t)
	for path, form := range forms {
		form.Set("csrf", token)
		if code := forge(t, ctx, b, path, form); code != http.StatusForbidden {
			t.Errorf("read-only POST %s: %d, want 403", path, code)
		}
	}
	if after := b.snapshot(t); after != before {
		t.Fatalf("read-only POSTs changed the database:\nbefore %s\nafter  %s", before, after)
	}
}

// TestBrowserAuthorize: an Authorize hook that refuses the logged-in user
// shows 403 with its reason and changes nothing; for a user it allows, the
// same click changes the task, recorded with the actor it returned. A POST
// to each action endpoint by the refused user changes nothing either.
func TestBrowserAuthorize(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	b := setup(t, dashboard.Options{Prefix: prefix, Refresh: -1, Authorize: func(r *http.Request, a dashboard.Action) (string, error) {
		switch user := userOf(r); user {
		case "alice":
			return "alice@example.com", nil
		default:
			return "", errors.New(user + " may only look, not " + a.String())
		}
	}}, requireUser)
	failed, _ := seedEmbedded(t, b)
	forms := actionTargets(t, b)

	login(t, ctx, b, "viewer")
	before := b.snapshot(t)
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", b.url, failed)), chromedp.WaitVisible(chromedp.CSS(`form[action$="/requeue"]`)))
	do(t, ctx, chromedp.Click(chromedp.CSS(`form[action$="/requeue"] button`), chromedp.NodeVisible))
	waitJS(t, ctx, "the refusal", `!!document.querySelector(".flash.error") && document.querySelector("h1").textContent.startsWith("403")`)
	if got := text(t, ctx, ".flash.error"); got != fmt.Sprintf("viewer may only look, not requeue task %d", failed) {
		t.Errorf("the refusal reads %q", got)
	}
	token := eval[string](t, ctx, `document.querySelector('input[name="csrf"]') ? document.querySelector('input[name="csrf"]').value : ""`)
	if token == "" {
		do(t, ctx, chromedp.Navigate(b.url+"/failed"), chromedp.WaitReady(chromedp.CSS(`input[name="csrf"]`)))
		token = eval[string](t, ctx, `document.querySelector('input[name="csrf"]').value`)
	}
	for path, form := range forms {
		form.Set("csrf", token)
		if code := forge(t, ctx, b, path, form); code != http.StatusForbidden {
			t.Errorf("viewer's POST %s: %d, want 403", path, code)
		}
	}
	if after := b.snapshot(t); after != before {
		t.Fatalf("refused actions changed the database:\nbefore %s\nafter  %s", before, after)
	}

	login(t, ctx, b, "alice")
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", b.url, failed)), chromedp.WaitVisible(chromedp.CSS(`form[action$="/requeue"]`)))
	do(t, ctx, chromedp.Click(chromedp.CSS(`form[action$="/requeue"] button`), chromedp.NodeVisible))
	waitFlash(t, ctx, fmt.Sprintf("Requeued task %d.", failed))
	if got := b.status(t, failed); got != queue.StatusPending {
		t.Fatalf("task %d is %s after alice's requeue", failed, got)
	}
	records, err := b.client.AuditLog(context.Background(), queue.AuditFilter{Source: queue.SourceDashboard})
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 1 || records[0].Actor != "alice@example.com" || records[0].Action != queue.AuditRequeue || records[0].Affected != 1 {
		t.Fatalf("audit records %+v, want alice@example.com's requeue", records)
	}
}
