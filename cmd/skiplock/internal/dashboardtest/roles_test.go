package dashboardtest

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

// TestObserverDashboard: the dashboard served by an observer role (the
// grants of `skiplock migrate grants --kind observer`) shows every page,
// a running worker's task locks included, and refuses every change with a
// 403 page that names the missing privilege, changing nothing.
func TestObserverDashboard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t, true)
	admin := pgtest.NewPool(t, schema)
	seeded := &bundle{pool: admin, client: queue.New(admin)}
	failed := seeded.seed(t) // with a worker running as the superuser
	wf := seedWorkflow(t, seeded)
	key, _ := seedSequence(t, seeded)

	observer := pgtest.PoolAs(t, schema, pgtest.Role(t, schema, migrations.Observer))
	b := serveClient(t, queue.New(observer))
	pages := []string{
		"/", "/tasks", "/tasks?state=failed", "/tasks/" + strconv.FormatInt(failed, 10),
		"/workflows/" + strconv.FormatInt(wf.ID, 10), "/sequence?key=" + url.QueryEscape(key),
		"/failed", "/locks", "/enqueue", "/periodic", "/ratelimits",
	}
	c := browserless(t)
	var token string
	for _, p := range pages {
		code, body := get(t, c, b.url+p)
		if code != http.StatusOK || strings.Contains(body, "permission denied") {
			t.Errorf("GET %s as observer: %d\n%s", p, code, body)
		}
		if m := csrfField.FindStringSubmatch(body); m != nil {
			token = m[1]
		}
	}
	// pg_locks needs no grant: the observer sees the superuser's worker
	// holding its two running reports.
	pgtest.Eventually(t, 5*time.Second, "the observer seeing two task locks", func() bool {
		locks, err := ops.Locks(ctx, b.client)
		return err == nil && len(locks) == 2 && locks[0].WorkerID == "reports-0-17-p0q3"
	})
	if token == "" {
		t.Fatal("no CSRF token on any page")
	}

	before := seeded.status(t, failed)
	var snapshot string
	read := func() string {
		t.Helper()
		var s string
		if err := admin.QueryRow(ctx, `SELECT concat_ws('|', (SELECT md5(string_agg(t::text, ',' ORDER BY t.id)) FROM skiplock_tasks AS t),
			(SELECT string_agg(q::text, ',' ORDER BY q.name) FROM skiplock_queues AS q))`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	id := strconv.FormatInt(failed, 10)
	for _, action := range []struct {
		path string
		form url.Values
	}{
		{"/tasks/" + id + "/requeue", nil},
		{"/tasks/" + id + "/cancel", nil},
		{"/tasks/" + id + "/delete", nil},
		{"/requeue", url.Values{"id": {id}}},
		{"/queues/mail/pause", nil},
		{"/queues/webhooks/resume", nil},
		{"/enqueue", url.Values{"name": {"job"}, "queue": {"default"}, "payload": {"{}"}}},
	} {
		if snapshot == "" {
			snapshot = read()
		}
		form := url.Values{"csrf": {token}}
		for k, v := range action.form {
			form[k] = v
		}
		req, _ := http.NewRequest(http.MethodPost, b.url+action.path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", b.url)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		body := string(raw)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "permission denied for table") ||
			!strings.Contains(body, "skiplock migrate grants") {
			t.Errorf("POST %s as observer: %d, want 403 naming the missing privilege\n%s", action.path, resp.StatusCode, body)
		}
	}
	if after := read(); after != snapshot {
		t.Fatal("the observer's refused actions changed tasks or queues")
	}
	if got := seeded.status(t, failed); got != before {
		t.Fatalf("task %d is %s, was %s", failed, got, before)
	}
}

// serveClient serves the dashboard of client until the test ends, as
// setup does, for a client whose role differs from the test's.
func serveClient(t *testing.T, client *queue.Client) *bundle {
	t.Helper()
	h, err := dashboard.New(client, dashboard.Options{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &bundle{client: client, url: srv.URL, origin: srv.URL}
}

// browserless is an HTTP client that keeps cookies and does not follow
// redirects, as a form post from a page would see them.
func browserless(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// get fetches u and returns its status and body.
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

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
