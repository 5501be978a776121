package dashboardtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
	"github.com/skiplock/skiplock/worker"
)

// The browser tests drive the dashboard in a real headless Chromium (or
// Chrome), found as $SKIPLOCK_CHROMIUM, on PATH under the names distributions
// give it, or where macOS and snaps install it.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

var chromiumPaths = []string{
	"/usr/bin/chromium", "/usr/lib/chromium/chromium", "/snap/bin/chromium",
	"/Applications/Chromium.app/Contents/MacOS/Chromium",
	"/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
}

// findChromium returns Chromium's path, or a message saying what to install.
func findChromium() (string, error) {
	if p := os.Getenv("SKIPLOCK_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("SKIPLOCK_CHROMIUM=%s: %w", p, err)
		}
		return p, nil
	}
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	for _, p := range chromiumPaths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("the dashboard's browser tests need Chromium, found neither %s on PATH nor %s "+
		"(run .ci/test, which installs it; or apt-get install chromium; or set SKIPLOCK_CHROMIUM)",
		strings.Join(chromiumNames, ", "), strings.Join(chromiumPaths, ", "))
}

// updateScreenshots rewrites docs/screenshots/*.png when set to 1.
const updateScreenshots = "SKIPLOCK_UPDATE_SCREENSHOTS"

// browser starts a headless Chromium for the test and returns a tab. Every
// confirmation dialog is accepted, as a person clicking OK would; a
// script error on a page fails the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := findChromium()
	if err != nil {
		t.Fatal(err)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.WindowSize(1440, 900),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	// The listeners below report through t, which must not be used once
	// the test has ended.
	var mu sync.Mutex
	ended := false
	report := func(f func()) {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			f()
		}
	}
	t.Cleanup(func() {
		mu.Lock()
		ended = true
		mu.Unlock()
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	go func() {
		for ev, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			report(func() { t.Logf("dialog: %s", ev.Message) })
			go func() {
				_, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
				if err != nil && ctx.Err() == nil {
					report(func() { t.Errorf("accepting dialog %q: %v", ev.Message, err) })
				}
			}()
		}
	}()
	go func() {
		for ev, err := range chromedp.Events(ctx, runtime.ExceptionThrown) {
			if err != nil {
				return
			}
			report(func() {
				t.Errorf("script error on the page: %s %v", ev.ExceptionDetails.Text, ev.ExceptionDetails.Exception)
			})
		}
	}()
	return ctx
}

// do runs steps with a deadline.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for try := 1; ; try++ {
		err := chromedp.Do(ctx, steps...)
		// The page re-rendered between finding a node and acting on it
		// (likelier on a busy machine): a person would click again. Only a
		// single step is retried, so nothing is done twice.
		if err != nil && len(steps) == 1 && try < 5 && strings.Contains(err.Error(), "Could not find node with given id") {
			t.Logf("retrying a step on a re-rendered page: %v", err)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

func text(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css), chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("reading %s: %v", css, err)
	}
	return s
}

// waitJS polls a JavaScript predicate until it holds, across navigations;
// on a timeout it logs the predicate's last error and the page's state.
func waitJS(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	var last error
	held := false
	defer func() {
		if !held {
			t.Logf("%s is still false (%v); page state: %s", js, last, pageState(ctx))
		}
	}()
	pgtest.Eventually(t, 2*time.Second, what, func() bool {
		ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ok, err := chromedp.Run(ectx, chromedp.Evaluate[bool](js))
		last = err
		return err == nil && ok
	})
	held = true
}

// pageState describes what a failed wait saw: where the page is, whether it
// is loaded, visible and refreshing, and what has the focus.
func pageState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
		href: location.href,
		readyState: document.readyState,
		hidden: document.hidden,
		live: (document.getElementById("live") || {}).textContent,
		refreshedAgoMs: document.body.dataset.refreshed ? Date.now() - Number(document.body.dataset.refreshed) : null,
		focus: document.activeElement ? document.activeElement.tagName + (document.activeElement.closest("main") ? " in main" : "") : null,
		checked: document.querySelectorAll('main input[type="checkbox"]:checked').length,
		selection: String(window.getSelection()),
	})`))
	if err != nil {
		return err.Error()
	}
	return s
}

// waitFlash waits for the message a POST leaves on the next page.
func waitFlash(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	waitJS(t, ctx, "the message "+want, fmt.Sprintf(
		`!!document.querySelector(".flash") && document.querySelector(".flash").textContent.includes(%q)`, want))
}

// waitStatus polls the database until the task has the status.
func (b *bundle) waitStatus(t *testing.T, id int64, want queue.Status) {
	t.Helper()
	pgtest.Eventually(t, 5*time.Second, fmt.Sprintf("task %d to be %s", id, want), func() bool {
		return b.status(t, id) == want
	})
}

// runWorker runs a real worker on the dashboard's schema until the test
// ends.
func (b *bundle) runWorker(t *testing.T, cfg worker.Config, handlers worker.Handlers) {
	t.Helper()
	cfg.PollInterval = 50 * time.Millisecond
	cfg.RescueInterval = 200 * time.Millisecond
	cfg.HealthInterval = 200 * time.Millisecond
	cfg.ShutdownGrace = 100 * time.Millisecond
	cfg.RetryBackoff = func(int) time.Duration { return 0 }
	if cfg.Logger == nil {
		cfg.Logger = discard()
	}
	w := worker.New(b.pool, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, handlers) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
}

// screenshot saves the page to docs/screenshots/NAME.png when
// SKIPLOCK_UPDATE_SCREENSHOTS=1, so that ordinary runs leave the tree as
// it is.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv(updateScreenshots) != "1" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join("..", "..", "..", "..", "docs", "screenshots", name+".png")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

// TestBrowserRequeue fails tasks with a real worker, requeues them through
// the dashboard (in bulk from the failed page, and one from its own page)
// and sees them run.
func TestBrowserRequeue(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	b := setup(t, dashboard.Options{Refresh: -1})
	var broken atomic.Bool
	broken.Store(true)
	b.runWorker(t, worker.Config{Queues: []string{"mail"}}, worker.Handlers{
		"email.send": func(context.Context, *worker.Task) error {
			if broken.Load() {
				return fmt.Errorf("smtp: 421 4.7.0 try again later")
			}
			return nil
		},
	})
	var ids []int64
	for i := range 3 {
		id, err := b.client.Enqueue(context.Background(), "email.send", map[string]any{"to": fmt.Sprintf("user%d@example.com", i)},
			queue.WithQueue("mail"), queue.WithMaxAttempts(1))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id.ID)
	}
	for _, id := range ids {
		b.waitStatus(t, id, queue.StatusFailed)
	}
	broken.Store(false)

	do(t, ctx, chromedp.Navigate(b.url+"/failed"), chromedp.WaitVisible(chromedp.CSS("table.tasks")))
	if n := eval[int](t, ctx, `document.querySelectorAll('input[name="id"]').length`); n != 3 {
		t.Fatalf("%d failed tasks listed, want 3", n)
	}
	if got := text(t, ctx, "td.err"); !strings.Contains(got, "smtp: 421") {
		t.Fatalf("last error shown as %q", got)
	}
	do(t, ctx,
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`input[name="id"][value="%d"]`, ids[0])), chromedp.NodeVisible),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`input[name="id"][value="%d"]`, ids[1])), chromedp.NodeVisible),
		chromedp.Click(chromedp.CSS(`button[formaction="/requeue"]`), chromedp.NodeVisible),
	)
	waitFlash(t, ctx, "Requeued 2 tasks.")
	b.waitStatus(t, ids[0], queue.StatusCompleted)
	b.waitStatus(t, ids[1], queue.StatusCompleted)
	if got := b.status(t, ids[2]); got != queue.StatusFailed {
		t.Fatalf("the unselected task is %s, want still failed", got)
	}

	// One task, from its own page.
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", b.url, ids[2])), chromedp.WaitVisible(chromedp.CSS("h1")))
	do(t, ctx, chromedp.Click(chromedp.CSS(`form[action$="/requeue"] button`), chromedp.NodeVisible))
	waitFlash(t, ctx, fmt.Sprintf("Requeued task %d.", ids[2]))
	b.waitStatus(t, ids[2], queue.StatusCompleted)
	do(t, ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("table.attempts")))
	if got := text(t, ctx, "h1 .badge"); got != "completed" {
		t.Fatalf("task page shows status %q, want completed", got)
	}
	history := text(t, ctx, "table.attempts")
	for _, want := range []string{"completed", "requeued", "requeued from the dashboard", "error", "smtp: 421", b.workerHost(t)} {
		if !strings.Contains(history, want) {
			t.Errorf("attempt history lacks %q:\n%s", want, history)
		}
	}
}

func (b *bundle) workerHost(t *testing.T) string {
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return host
}

// TestBrowserHostilePayload shows that a payload made of markup is shown
// as text and runs nothing.
func TestBrowserHostilePayload(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	b := setup(t, dashboard.Options{Refresh: -1})
	id := b.insert(t, "mail", "email.send", queue.StatusFailed, hostile, failure(`<img src=x onerror=window.__pwned=3>`), time.Minute)
	literal := `<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>`

	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", b.url, id)), chromedp.WaitVisible(chromedp.ID("payload")))
	if got := text(t, ctx, "#payload"); !strings.Contains(got, literal) {
		t.Errorf("payload shown as %q, want the literal text %q", got, literal)
	}
	if got := text(t, ctx, "table.attempts"); !strings.Contains(got, `<img src=x onerror=window.__pwned=3>`) {
		t.Errorf("error shown as %q, want the literal text", got)
	}
	for _, path := range []string{fmt.Sprintf("/tasks/%d", id), "/tasks", "/failed"} {
		do(t, ctx, chromedp.Navigate(b.url+path), chromedp.WaitVisible(chromedp.CSS("h1")))
		if got := eval[string](t, ctx, `typeof window.__pwned`); got != "undefined" {
			t.Errorf("%s: window.__pwned is %s: the payload ran", path, got)
		}
		if n := eval[int](t, ctx, `document.querySelectorAll("main script, main img").length`); n != 0 {
			t.Errorf("%s: %d script or img elements in the page's content", path, n)
		}
	}
	if got := text(t, ctx, "td.payload"); !strings.Contains(got, "<script>window.__pwned=1</script>") {
		t.Errorf("payload preview shown as %q", got)
	}
}

// zoned matches a time shown with its zone.
var zoned = `/\d\d:\d\d:\d\d [A-Z][A-Za-z0-9+-]*/`

// TestBrowserPages loads every page with realistic data, a real worker
// holding task locks, pauses and resumes a queue, sees a page refresh
// itself, and takes the screenshots of docs/screenshots.
func TestBrowserPages(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	b := setup(t, dashboard.Options{Refresh: time.Second})
	failedID := b.seed(t)

	// 1400 px: the width at which a paused queue's row used to overflow
	// and clip its Resume button.
	do(t, ctx, chromedp.EmulateViewport(1400, 1000))

	do(t, ctx, chromedp.Navigate(b.url+"/"), chromedp.WaitVisible(chromedp.CSS("table.queues")))
	// Auto-refresh swaps the page's nodes under the test's reads: pause it
	// (the button keeps it paused across pages) until the test looks at it.
	live(t, ctx, false)
	for _, q := range []string{"default", "mail", "reports", "webhooks"} {
		waitJS(t, ctx, "queue "+q, fmt.Sprintf(`[...document.querySelectorAll("table.queues td.name")].some(td => td.textContent.trim().startsWith(%q))`, q))
	}
	// Charts come from the table at once, on a dashboard that has just
	// started: bars, values on the axis, times with their zone, and each
	// bar's numbers as a tooltip.
	if n := eval[int](t, ctx, `document.querySelectorAll("table.queues svg.chart").length`); n != 4 {
		t.Errorf("%d queue charts, want 4", n)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("figure.throughput svg.chart rect.done").length`); n < 50 {
		t.Errorf("the throughput chart has %d bars of completed tasks, want one for nearly every minute of the seeded hour", n)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("figure.throughput svg.chart rect.fail").length`); n < 10 {
		t.Errorf("the throughput chart has %d bars of failed tasks", n)
	}
	if got := eval[string](t, ctx, `[...document.querySelectorAll("figure.throughput text.ylabel")].map(e => e.textContent).join(",")`); !strings.HasPrefix(got, "0,") || len(strings.Split(got, ",")) != 5 {
		t.Errorf("value axis labels %q, want 0 and four gridlines", got)
	}
	if !eval[bool](t, ctx, `/^\d\d:\d\d [A-Z][A-Za-z0-9+-]*$/.test([...document.querySelectorAll("figure.throughput text.xlabel")].pop().textContent)`) {
		t.Error("the time axis's last label has no zone")
	}
	if !eval[bool](t, ctx, `[...document.querySelectorAll("figure.throughput g.bar title")].some(e => / completed, \d+ failed$/.test(e.textContent) && !/: 0 completed/.test(e.textContent))`) {
		t.Error("no bar tells its numbers")
	}
	if got := text(t, ctx, "tr.paused td.name"); !strings.Contains(got, "webhooks") || !strings.Contains(got, "paused") {
		t.Errorf("paused row reads %q, want webhooks marked paused", got)
	}
	// Nothing overflows: the Resume button is inside the window.
	if !eval[bool](t, ctx, `(() => { const r = document.querySelector('tr.paused form[action$="/resume"] button').getBoundingClientRect(); return r.width > 0 && r.right <= document.documentElement.clientWidth; })()`) {
		t.Errorf("the paused row's Resume button is clipped: right edge %v, window %v",
			eval[float64](t, ctx, `document.querySelector('tr.paused form[action$="/resume"] button').getBoundingClientRect().right`),
			eval[float64](t, ctx, `document.documentElement.clientWidth`))
	}
	if !eval[bool](t, ctx, `document.documentElement.scrollWidth <= document.documentElement.clientWidth`) {
		t.Errorf("the queues page scrolls sideways at 1400 px: %v > %v", eval[float64](t, ctx, `document.documentElement.scrollWidth`),
			eval[float64](t, ctx, `document.documentElement.clientWidth`))
	}
	if got := text(t, ctx, "table.queues"); !strings.Contains(got, "Retrying") {
		t.Errorf("queues table lacks retrying counts: %q", got)
	}
	screenshot(t, ctx, "queues")

	// Pause a queue and resume it, through the buttons.
	do(t, ctx, chromedp.Click(chromedp.CSS(`form[action="/queues/mail/pause"] button`), chromedp.NodeVisible))
	waitFlash(t, ctx, "Paused queue mail")
	if paused := b.paused(t); !paused["mail"] {
		t.Fatalf("paused queues %v after Pause, want mail", paused)
	}
	do(t, ctx, chromedp.Click(chromedp.CSS(`form[action="/queues/mail/resume"] button`), chromedp.NodeVisible))
	waitFlash(t, ctx, "Resumed queue mail")
	if paused := b.paused(t); paused["mail"] {
		t.Fatalf("mail still paused after Resume")
	}

	// The page refreshes itself: a queue that appears now shows up without
	// a reload.
	if _, err := b.client.Enqueue(context.Background(), "audit.write", nil, queue.WithQueue("audit")); err != nil {
		t.Fatal(err)
	}
	live(t, ctx, true)
	waitJS(t, ctx, "the refresh to show queue audit", `[...document.querySelectorAll("table.queues td.name")].some(td => td.textContent.trim() === "audit")`)
	live(t, ctx, false)

	do(t, ctx, chromedp.Navigate(b.url+"/tasks"), chromedp.WaitVisible(chromedp.CSS("table.tasks")))
	if !eval[bool](t, ctx, zoned+`.test(document.querySelector("table.tasks tbody td[title]").title)`) {
		t.Error("a task's time has no zone")
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("table.tasks tbody tr").length`); n != dashboard.PageSize {
		t.Errorf("tasks page lists %d rows, want %d", n, dashboard.PageSize)
	}
	if !eval[bool](t, ctx, `!!document.querySelector('a[rel="next"]')`) {
		t.Error("tasks page has no link to older tasks")
	}
	screenshot(t, ctx, "tasks")
	do(t, ctx, chromedp.Click(chromedp.CSS(`a[rel="next"]`), chromedp.NodeVisible))
	waitJS(t, ctx, "the second page", `location.search.includes("before=")`)

	do(t, ctx, chromedp.Navigate(b.url+"/failed?queue=webhooks"), chromedp.WaitVisible(chromedp.CSS("table.tasks")))
	if got := text(t, ctx, "td.err"); !strings.Contains(got, "503") {
		t.Errorf("failed page's first error is %q", got)
	}
	do(t, ctx, chromedp.Navigate(b.url+"/failed"), chromedp.WaitVisible(chromedp.CSS("table.tasks")))
	screenshot(t, ctx, "failed")

	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", b.url, failedID)), chromedp.WaitVisible(chromedp.CSS("table.attempts")))
	if n := eval[int](t, ctx, `document.querySelectorAll("table.attempts tbody tr").length`); n != 3 {
		t.Errorf("task page shows %d attempts, want 3", n)
	}
	if got := text(t, ctx, "dl.fields"); !regexp.MustCompile(`Created\s*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]`).MatchString(got) {
		t.Errorf("task fields without zones: %q", got)
	}
	if got := text(t, ctx, "p.why"); got != "out of attempts (3 of 3)" {
		t.Errorf("failed task's reason %q", got)
	}
	screenshot(t, ctx, "task")

	do(t, ctx, chromedp.Navigate(b.url+"/locks"), chromedp.WaitVisible(chromedp.CSS("table.workers")))
	if got := text(t, ctx, "table.workers"); !strings.Contains(got, "connected") || !strings.Contains(got, "reports") {
		t.Errorf("workers table reads %q", got)
	}
	// The live worker first; the one gone a minute ago marked gone; the
	// one gone for hours not listed.
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll("table.workers tbody tr")].map(tr => tr.cells[0].textContent + " " + tr.cells[1].textContent)`)
	if strings.Join(rows, "|") != "reports-0-17-p0q3 live|app-7f9c4-3-x0a2 gone" {
		t.Errorf("workers listed: %q, want the live one, then the one gone a minute ago", rows)
	}
	if got := text(t, ctx, "table.workers + p.note"); !strings.Contains(got, "1 gone longer ago is not shown") {
		t.Errorf("workers note: %q", got)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("table.locks tbody tr").length`); n != 2 {
		t.Errorf("%d task locks listed, want the 2 the worker holds", n)
	}
	screenshot(t, ctx, "locks")

	// The running task's page names its lock holder.
	do(t, ctx, chromedp.Click(chromedp.CSS(`table.locks a`), chromedp.NodeVisible))
	waitJS(t, ctx, "the lock holder", `!!document.querySelector("p.lock") && document.querySelector("p.lock").textContent.includes("registered by worker")`)

	do(t, ctx, chromedp.Navigate(b.url+"/periodic"), chromedp.WaitVisible(chromedp.CSS("table.periodic")))
	if got := text(t, ctx, "table.periodic"); !strings.Contains(got, "nightly-report") || !strings.Contains(got, "hourly-digest") || !regexp.MustCompile(`00:00:00 [A-Z]`).MatchString(got) {
		t.Errorf("periodic page reads %q", got)
	}
	screenshot(t, ctx, "periodic")
	do(t, ctx, chromedp.Navigate(b.url+"/ratelimits"), chromedp.WaitVisible(chromedp.CSS("table.ratelimits")))
	if got := text(t, ctx, "table.ratelimits"); !strings.Contains(got, "queue:webhooks") || !strings.Contains(got, "42") {
		t.Errorf("rate limits page reads %q", got)
	}
	screenshot(t, ctx, "ratelimits")

}

// live turns the page's auto-refresh on or off with its button.
func live(t *testing.T, ctx context.Context, on bool) {
	t.Helper()
	// Until app.js has run (deferred, slow on a busy machine), the button
	// shows the server's default and ignores clicks.
	waitJS(t, ctx, "the page's script", `document.documentElement.dataset.js === "ready"`)
	if eval[bool](t, ctx, `document.getElementById("live").classList.contains("off")`) == on {
		do(t, ctx, chromedp.Click(chromedp.ID("live"), chromedp.NodeVisible))
	}
	waitJS(t, ctx, "the refresh button", fmt.Sprintf(`document.getElementById("live").classList.contains("off") === %v`, !on))
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

// TestBrowserActions enqueues a task through the form, runs it now, deletes
// it; filters tasks by state, queue and name with the dropdowns; and shows
// a permanent failure from a real worker apart from running out of
// attempts.
func TestBrowserActions(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	b := setup(t, dashboard.Options{Refresh: -1})
	bg := context.Background()
	b.runWorker(t, worker.Config{Queues: []string{"images"}}, worker.Handlers{
		"image.resize": func(context.Context, *worker.Task) error {
			return worker.Permanent(errors.New("image: unknown format"))
		},
	})
	permanent, err := b.client.Enqueue(bg, "image.resize", map[string]string{"url": "x.heic"}, queue.WithQueue("images"), queue.WithMaxAttempts(5))
	if err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, permanent.ID, queue.StatusFailed)
	exhausted := b.insert(t, "images", "image.resize", queue.StatusFailed, "", failure("timeout"), time.Minute)
	if _, err := b.pool.Exec(bg, `UPDATE skiplock_tasks SET attempt = max_attempts WHERE id = $1`, exhausted); err != nil {
		t.Fatal(err)
	}
	retrying := b.insert(t, "mail", "email.send", queue.StatusPending, "", failure("smtp: 421"), 0)
	if _, err := b.pool.Exec(bg, `UPDATE skiplock_tasks SET attempt = 1, run_at = now() + interval '10 minutes' WHERE id = $1`, retrying); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "mail", "email.digest", queue.StatusPending, "", "", 0)

	// A permanent failure is told apart, on its page and in the list.
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", b.url, permanent.ID)), chromedp.WaitVisible(chromedp.CSS("h1")))
	if got := text(t, ctx, "h1"); !strings.Contains(got, "failed") || !strings.Contains(got, "permanent") {
		t.Errorf("permanently failed task's title %q", got)
	}
	if got := text(t, ctx, "p.why"); got != "permanent error on attempt 1 of 5, not retried" {
		t.Errorf("permanently failed task's reason %q", got)
	}
	do(t, ctx, chromedp.Navigate(b.url+"/failed"), chromedp.WaitVisible(chromedp.CSS("table.tasks")))
	badges := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll("table.tasks tbody tr")].map(tr => [tr.querySelector("td.n a").textContent, tr.querySelector("td:has(> .badge)").textContent.trim()]))`)
	if badges[fmt.Sprint(permanent.ID)] != "failed permanent" || badges[fmt.Sprint(exhausted)] != "failed" {
		t.Errorf("failed page badges %v", badges)
	}

	// Filter with the dropdowns: state retrying, queue mail.
	do(t, ctx, chromedp.Navigate(b.url+"/tasks"), chromedp.WaitVisible(chromedp.CSS(`select[name="queue"]`)))
	queues := eval[[]string](t, ctx, `[...document.querySelectorAll('select[name="queue"] option')].map(o => o.value)`)
	names := eval[[]string](t, ctx, `[...document.querySelectorAll('select[name="name"] option')].map(o => o.value)`)
	if strings.Join(queues, ",") != ",images,mail" || strings.Join(names, ",") != ",email.digest,email.send,image.resize" {
		t.Errorf("filter choices: queues %q, names %q", queues, names)
	}
	do(t, ctx,
		chromedp.SetValue(chromedp.CSS(`select[name="status"]`), "retrying"),
		chromedp.SetValue(chromedp.CSS(`select[name="queue"]`), "mail"),
		chromedp.Click(chromedp.CSS(`form.filter button[type="submit"]`), chromedp.NodeVisible),
	)
	// The address changes before the new page's table is in: wait for both.
	waitJS(t, ctx, "the filtered list", `location.search.includes("status=retrying") && location.search.includes("queue=mail")
		&& document.readyState === "complete" && document.querySelectorAll("table.tasks tbody tr").length > 0`)
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll("table.tasks tbody tr")].map(tr => tr.querySelector("td.n a").textContent + " " + tr.querySelector("td:has(> .badge)").textContent.trim())`)
	if len(rows) != 1 || rows[0] != fmt.Sprintf("%d retrying", retrying) {
		t.Fatalf("retrying tasks of mail: %q, want task %d", rows, retrying)
	}

	// Run the retrying task now.
	do(t, ctx, chromedp.Click(chromedp.CSS("table.tasks td.n a"), chromedp.NodeVisible))
	waitJS(t, ctx, "the task page", `!!document.querySelector('form[action$="/run-now"]')`)
	do(t, ctx, chromedp.Click(chromedp.CSS(`form[action$="/run-now"] button`), chromedp.NodeVisible))
	waitFlash(t, ctx, fmt.Sprintf("Task %d is due now.", retrying))
	if task, err := b.client.Get(bg, retrying); err != nil || task.Status != queue.StatusPending || task.Attempt != 1 {
		t.Fatalf("after Run now: %+v, %v; want due, attempt kept", task, err)
	}
	if got := text(t, ctx, "h1 .badge"); got != "pending" {
		t.Errorf("after Run now the badge reads %q", got)
	}

	// Enqueue through the form: delayed, with keys.
	do(t, ctx, chromedp.Navigate(b.url+"/enqueue"), chromedp.WaitVisible(chromedp.CSS("form.enqueue")))
	for field, value := range map[string]string{
		`input[name="name"]`: "report.build", `input[name="queue"]`: "reports", `textarea[name="payload"]`: `{"month": "2026-11"}`,
		`input[name="priority"]`: "-2", `input[name="delay"]`: "1h", `input[name="unique_key"]`: "report:2026-11",
		`input[name="exclusive_key"]`: "reports",
	} {
		do(t, ctx, chromedp.SetValue(chromedp.CSS(field), value))
	}
	screenshot(t, ctx, "enqueue")
	do(t, ctx, chromedp.Click(chromedp.CSS(`form.enqueue button[type="submit"]`), chromedp.NodeVisible))
	waitFlash(t, ctx, "Enqueued task ")
	var id int64
	var key, exclusive string
	var priority int
	var delayed bool
	err = b.pool.QueryRow(bg, `SELECT id, unique_key, exclusive_key, priority, run_at > now() + interval '50 minutes' FROM skiplock_tasks
		WHERE name = 'report.build' AND queue = 'reports' AND payload = '{"month": "2026-11"}'`).Scan(&id, &key, &exclusive, &priority, &delayed)
	if err != nil || key != "report:2026-11" || exclusive != "reports" || priority != -2 || !delayed {
		t.Fatalf("enqueued row: id %d key %q exclusive %q priority %d delayed %v (%v)", id, key, exclusive, priority, delayed, err)
	}
	waitJS(t, ctx, "the new task's page", fmt.Sprintf(`location.pathname === "/tasks/%d"`, id))
	if got := text(t, ctx, "h1 .badge"); got != "scheduled" {
		t.Errorf("a delayed task's badge reads %q, want scheduled", got)
	}
	// The same unique key again: nothing enqueued, the holder shown.
	do(t, ctx, chromedp.Navigate(b.url+"/enqueue"), chromedp.WaitVisible(chromedp.CSS("form.enqueue")))
	do(t, ctx,
		chromedp.SetValue(chromedp.CSS(`input[name="name"]`), "report.build"),
		chromedp.SetValue(chromedp.CSS(`input[name="unique_key"]`), "report:2026-11"),
		chromedp.Click(chromedp.CSS(`form.enqueue button[type="submit"]`), chromedp.NodeVisible),
	)
	waitFlash(t, ctx, fmt.Sprintf("Not enqueued: task %d holds unique key", id))
	// Bad JSON: one clear error, nothing enqueued.
	do(t, ctx, chromedp.Navigate(b.url+"/enqueue"), chromedp.WaitVisible(chromedp.CSS("form.enqueue")))
	do(t, ctx,
		chromedp.SetValue(chromedp.CSS(`input[name="name"]`), "broken"),
		chromedp.SetValue(chromedp.CSS(`textarea[name="payload"]`), `{"a":`),
		chromedp.Click(chromedp.CSS(`form.enqueue button[type="submit"]`), chromedp.NodeVisible),
	)
	waitJS(t, ctx, "the error page", `!!document.querySelector(".flash.error") && document.querySelector(".flash.error").textContent.includes("not valid JSON")`)
	var n int
	if err := b.pool.QueryRow(bg, `SELECT count(*) FROM skiplock_tasks WHERE name IN ('broken') OR (name = 'report.build' AND id <> $1)`, id).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tasks enqueued by refused forms (%v)", n, err)
	}

	// Delete it.
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", b.url, id)), chromedp.WaitVisible(chromedp.CSS(`form[action$="/delete"]`)))
	do(t, ctx, chromedp.Click(chromedp.CSS(`form[action$="/delete"] button`), chromedp.NodeVisible))
	waitFlash(t, ctx, fmt.Sprintf("Deleted task %d.", id))
	if _, err := b.client.Get(bg, id); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("task %d after Delete: %v, want not found", id, err)
	}
	waitJS(t, ctx, "the tasks page", `location.pathname === "/tasks"`)
}
