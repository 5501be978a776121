package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

// shardedSetup serves the dashboard over a fresh schema for each shard
// number, stamped with it, and, with down, a shard 9 whose server cannot
// be reached. It returns each shard's bundle (url is the top's) and the
// top's URL.
func shardedSetup(t *testing.T, opts dashboard.Options, down bool, shards ...int) (map[int]*bundle, string) {
	t.Helper()
	ctx := context.Background()
	pools := map[int]*pgxpool.Pool{}
	out := map[int]*bundle{}
	for _, n := range shards {
		pool := pgtest.Pool(t)
		if err := migrations.SetShard(ctx, pool, n); err != nil {
			t.Fatal(err)
		}
		pools[n] = pool
		out[n] = &bundle{pool: pool, client: queue.New(pool)}
	}
	if down {
		pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		pools[9] = pool
	}
	sc, err := queue.NewSharded(pools)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = discard()
	}
	h, err := dashboard.NewSharded(sc, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(opts.Prefix+"/", http.StripPrefix(opts.Prefix, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	for _, b := range out {
		b.url = srv.URL + opts.Prefix
	}
	return out, srv.URL + opts.Prefix
}

var tags = regexp.MustCompile(`<[^>]*>`)

// cells returns the text of the cells of the row that holds marker.
func cells(t *testing.T, body, marker string) []string {
	t.Helper()
	i := strings.Index(body, marker)
	if i < 0 {
		t.Fatalf("no row with %q in:\n%s", marker, body)
	}
	start := strings.LastIndex(body[:i], "<tr")
	end := i + strings.Index(body[i:], "</tr>")
	var out []string
	for _, c := range strings.Split(body[start:end], "</td>") {
		if txt := strings.TrimSpace(tags.ReplaceAllString(c, "")); txt != "" || strings.Contains(c, "<td") {
			out = append(out, txt)
		}
	}
	return out
}

func TestShardedQueues(t *testing.T) {
	t.Parallel()
	bs, top := shardedSetup(t, dashboard.Options{}, true, 1, 2)
	bs[1].insert(t, "mail", "send", queue.StatusPending, "", "", 0)
	bs[1].insert(t, "mail", "send", queue.StatusPending, "", "", 0)
	bs[2].insert(t, "mail", "send", queue.StatusPending, "", "", 0)
	bs[2].insert(t, "reports", "build", queue.StatusFailed, "", failure("out of memory"), 0)

	code, body := get(t, http.DefaultClient, top+"/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	// The totals: mail's three due tasks over both shards, one failed.
	if got := cells(t, body, `href="/tasks?queue=mail"`); got[1] != "3" || got[7] != "1, 2" {
		t.Fatalf("mail's totals row: %q, want 3 due on shards 1, 2", got)
	}
	if got := cells(t, body, `<td>Total</td>`); got[1] != "3" || got[6] != "1" || !strings.Contains(got[7], "without shard 9") {
		t.Fatalf("total row: %q, want 3 due, 1 failed, without shard 9", got)
	}
	// A row per shard and queue, naming its shard.
	for _, x := range []struct {
		marker string
		due    string
	}{{`href="/shards/1/tasks?queue=mail"`, "2"}, {`href="/shards/2/tasks?queue=mail"`, "1"}, {`href="/shards/2/tasks?queue=reports"`, "0"}} {
		got := cells(t, body, x.marker)
		if !strings.HasPrefix(x.marker, `href="/shards/`+strings.TrimPrefix(got[0], "shard ")+"/") || got[2] != x.due {
			t.Fatalf("row %s: %q, want its shard and %s due", x.marker, got, x.due)
		}
	}
	// The shard that is down: an error row naming it.
	if got := cells(t, body, `<a href="/shards/9/">shard 9`); got[0] != "shard 9" || !strings.HasPrefix(got[1], "down: ") {
		t.Fatalf("down row: %q", got)
	}

	// Each shard's own dashboard is under its number.
	code, body = get(t, http.DefaultClient, top+"/shards/2/")
	if code != http.StatusOK || !strings.Contains(body, `href="/shards/2/tasks?queue=reports"`) || strings.Contains(body, `href="/tasks?`) {
		t.Fatalf("GET /shards/2/: %d", code)
	}
	if !strings.Contains(body, `shard 2 · <a href="/">all shards</a>`) {
		t.Fatalf("shard 2's page does not name its shard:\n%s", body)
	}
	code, body = get(t, http.DefaultClient, top+"/shards/4/")
	if code != http.StatusNotFound || !strings.Contains(body, "this dashboard has shards 1, 2, 9") {
		t.Fatalf("GET /shards/4/: %d\n%s", code, body)
	}
}

func TestShardedTasks(t *testing.T) {
	t.Parallel()
	bs, top := shardedSetup(t, dashboard.Options{}, true, 1, 2)
	ctx := context.Background()
	want := map[int64]int{}
	for _, n := range []int{1, 2} {
		rows, err := bs[n].pool.Query(ctx, `
			INSERT INTO skiplock_tasks (queue, name, status, payload, created_at)
			SELECT 'mail', 'send', 'pending', '{}', now() - make_interval(secs => g*2 + $1) FROM generate_series(1, 30) g
			RETURNING id`, n)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			want[id] = n
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
	}

	// Two pages of every shard's tasks, newest first, each row its shard;
	// nothing missed or shown twice. Shard 9 is down: said, not listed.
	row := regexp.MustCompile(`<a href="/shards/(\d+)/tasks/(\d+)">`)
	seen := map[int64]bool{}
	next := top + "/tasks?queue=mail"
	for page := 0; next != ""; page++ {
		code, body := get(t, http.DefaultClient, next)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", next, code, body)
		}
		if !strings.Contains(body, "Shard 9 is down") {
			t.Fatalf("page %d does not say shard 9 is down", page)
		}
		ms := row.FindAllStringSubmatch(body, -1)
		if wantRows := []int{50, 10}[page]; len(ms) != wantRows {
			t.Fatalf("page %d: %d rows, want %d", page, len(ms), wantRows)
		}
		for _, m := range ms {
			var n int
			var id int64
			fmt.Sscan(m[1], &n)
			fmt.Sscan(m[2], &id)
			if want[id] != n || queue.ShardOf(id) != n || seen[id] {
				t.Fatalf("page %d: task %d as shard %d (want %d), seen before: %v", page, id, n, want[id], seen[id])
			}
			seen[id] = true
		}
		next = ""
		if m := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(body); m != nil {
			next = top + strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("listed %d tasks, want %d", len(seen), len(want))
	}

	// An ID leads to its shard's page.
	c := browserless(t)
	for id, n := range want {
		resp, err := c.Get(fmt.Sprintf("%s/tasks/%d", top, id))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusFound || loc != fmt.Sprintf("/shards/%d/tasks/%d", n, id) {
			t.Fatalf("GET /tasks/%d: %d to %q", id, resp.StatusCode, loc)
		}
		// On another shard's dashboard, the same.
		other := 3 - n
		resp, err = c.Get(fmt.Sprintf("%s/shards/%d/tasks/%d", top, other, id))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusFound || loc != fmt.Sprintf("/tasks/%d", id) {
			t.Fatalf("GET /shards/%d/tasks/%d: %d to %q", other, id, resp.StatusCode, loc)
		}
		code, body := get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", top, id))
		if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf("Task %d", id)) {
			t.Fatalf("following /tasks/%d: %d", id, code)
		}
		break
	}
	stray := int64(5)<<48 | 7
	code, body := get(t, c, fmt.Sprintf("%s/workflows/%d", top, stray))
	if code != http.StatusNotFound || !strings.Contains(body, fmt.Sprintf("ID %d is of shard 5, which this dashboard does not have", stray)) {
		t.Fatalf("GET /workflows/%d: %d\n%s", stray, code, body)
	}
}

// shardedPost posts form to u with the CSRF token of the top's failed
// page, read with c.
func shardedPost(t *testing.T, c *http.Client, top, u string, form url.Values) (int, string) {
	t.Helper()
	_, body := get(t, c, top+"/failed")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field on the failed page:\n%s", body)
	}
	form.Set("csrf", m[1])
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return resp.StatusCode, ""
	}
	_, body = get(t, c, top+resp.Header.Get("Location"))
	return resp.StatusCode, body
}

func TestShardedBulk(t *testing.T) {
	t.Parallel()
	bs, top := shardedSetup(t, dashboard.Options{}, false, 1, 2)
	ctx := context.Background()
	a := bs[1].insert(t, "mail", "send", queue.StatusFailed, "", failure("smtp"), 0)
	b1 := bs[2].insert(t, "mail", "send", queue.StatusFailed, "", failure("smtp"), 0)
	b2 := bs[2].insert(t, "mail", "send", queue.StatusFailed, "", failure("smtp"), 0)
	other := bs[2].insert(t, "reports", "build", queue.StatusFailed, "", failure("oom"), 0)
	c := browserless(t)

	// The page offers the bulk changes, over every shard, and a checkbox
	// per task of each shard.
	_, page := get(t, c, top+"/failed")
	for _, want := range []string{"<h1>Failed tasks · every shard</h1>", `id="bulk"`, "on every page of every shard?",
		fmt.Sprintf(`name="id" value="%d"`, a), fmt.Sprintf(`name="id" value="%d"`, other)} {
		if !strings.Contains(page, want) {
			t.Fatalf("the failed page over shards lacks %s:\n%s", want, page)
		}
	}

	// By IDs: only the tasks named, on their shard.
	code, body := shardedPost(t, c, top, top+"/requeue", url.Values{"id": {fmt.Sprint(b1)}})
	if code != http.StatusSeeOther || !strings.Contains(body, "Requeued 1 task.") {
		t.Fatalf("requeue of task %d: %d\n%s", b1, code, body)
	}
	for id, want := range map[int64]queue.Status{a: queue.StatusFailed, b1: queue.StatusPending, b2: queue.StatusFailed} {
		if got := bs[queue.ShardOf(id)].status(t, id); got != want {
			t.Fatalf("task %d is %s, want %s", id, got, want)
		}
	}
	// An ID of a shard the dashboard does not have: refused, nothing changed.
	code, _ = shardedPost(t, c, top, top+"/cancel", url.Values{"id": {fmt.Sprint(b2), fmt.Sprint(int64(5)<<48 | 1)}})
	if code != http.StatusBadRequest || bs[2].status(t, b2) != queue.StatusFailed {
		t.Fatalf("cancel naming shard 5: %d, task %d %s", code, b2, bs[2].status(t, b2))
	}

	// By filter: every failed task of queue mail, on every shard, one
	// audit record on each shard.
	code, body = shardedPost(t, c, top, top+"/requeue", url.Values{"scope": {"filter"}, "queue": {"mail"}})
	if code != http.StatusSeeOther || !strings.Contains(body, "Requeued 2 tasks.") {
		t.Fatalf("requeue of queue mail: %d\n%s", code, body)
	}
	for id, want := range map[int64]queue.Status{a: queue.StatusPending, b2: queue.StatusPending, other: queue.StatusFailed} {
		if got := bs[queue.ShardOf(id)].status(t, id); got != want {
			t.Fatalf("task %d is %s, want %s", id, got, want)
		}
	}
	for n, want := range map[int]int{1: 1, 2: 2} {
		log, err := bs[n].client.AuditLog(ctx, queue.AuditFilter{Action: queue.AuditRequeue})
		if err != nil || len(log) != want {
			t.Fatalf("shard %d's audit log: %d records (%v), want %d", n, len(log), err, want)
		}
	}
}

func TestShardedActionsGuarded(t *testing.T) {
	t.Parallel()
	ro, top := shardedSetup(t, dashboard.Options{ReadOnly: true}, false, 1, 2)
	id := ro[2].insert(t, "mail", "send", queue.StatusFailed, "", failure("smtp"), 0)
	_, body := get(t, http.DefaultClient, top+"/failed")
	if !strings.Contains(body, fmt.Sprintf("/shards/2/tasks/%d", id)) || strings.Contains(body, `id="bulk"`) {
		t.Fatalf("read-only failed page: task listed, no bulk form expected:\n%s", body)
	}
	for _, path := range []string{"/requeue", "/cancel", "/shards/2/requeue"} {
		resp, err := http.PostForm(top+path, url.Values{"scope": {"filter"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("read-only POST %s: %d, want 403", path, resp.StatusCode)
		}
	}
	if got := ro[2].status(t, id); got != queue.StatusFailed {
		t.Fatalf("read-only: task %d is %s", id, got)
	}

	// Without the CSRF token, or from another origin: refused.
	bs, top := shardedSetup(t, dashboard.Options{}, false, 1, 2)
	id = bs[1].insert(t, "mail", "send", queue.StatusFailed, "", failure("smtp"), 0)
	c := browserless(t)
	_, body = get(t, c, top+"/failed")
	token := csrfField.FindStringSubmatch(body)[1]
	for _, x := range []struct {
		path   string
		form   url.Values
		origin string
	}{
		{"/requeue", url.Values{"scope": {"filter"}}, ""},
		{"/requeue", url.Values{"scope": {"filter"}, "csrf": {strings.Repeat("0", len(token))}}, ""},
		{"/requeue", url.Values{"scope": {"filter"}, "csrf": {token}}, "http://attacker.example"},
		{"/shards/1/requeue", url.Values{"scope": {"filter"}}, ""},
	} {
		req, _ := http.NewRequest(http.MethodPost, top+x.path, strings.NewReader(x.form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if x.origin != "" {
			req.Header.Set("Origin", x.origin)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("POST %s %v origin %q: %d, want 403", x.path, x.form, x.origin, resp.StatusCode)
		}
	}
	if got := bs[1].status(t, id); got != queue.StatusFailed {
		t.Fatalf("refused requests changed task %d to %s", id, got)
	}

	// Authorize sees the action over shards and can refuse it.
	bs, top = shardedSetup(t, dashboard.Options{Authorize: func(r *http.Request, a dashboard.Action) (string, error) {
		return "", fmt.Errorf("nobody may %s", a)
	}}, false, 1, 2)
	id = bs[1].insert(t, "mail", "send", queue.StatusFailed, "", failure("smtp"), 0)
	code, _ := shardedPost(t, browserless(t), top, top+"/requeue", url.Values{"scope": {"filter"}})
	if code != http.StatusForbidden || bs[1].status(t, id) != queue.StatusFailed {
		t.Fatalf("refused by Authorize: %d, task %s", code, bs[1].status(t, id))
	}
}

// A change over every shard with one down: made on the others, the one
// down named.
func TestShardedBulkShardDown(t *testing.T) {
	t.Parallel()
	bs, top := shardedSetup(t, dashboard.Options{}, true, 1, 2)
	id := bs[2].insert(t, "mail", "send", queue.StatusFailed, "", failure("smtp"), 0)
	code, body := shardedPost(t, browserless(t), top, top+"/requeue", url.Values{"scope": {"filter"}})
	if code != http.StatusSeeOther || !strings.Contains(body, "Requeued 1 task. Not on every shard: shard 9: ") {
		t.Fatalf("requeue with shard 9 down: %d\n%s", code, body)
	}
	if got := bs[2].status(t, id); got != queue.StatusPending {
		t.Fatalf("task %d is %s, want pending", id, got)
	}
}
