package ui_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/skiplock/skiplock/internal/ui"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// The browser tests drive the dashboard in a real headless Chromium.
const chromiumPath = "/usr/bin/chromium"

// updateScreenshots rewrites docs/screenshots/*.png when set to 1.
const updateScreenshots = "SKIPLOCK_UPDATE_SCREENSHOTS"

// browser starts a headless Chromium for the test and returns a tab. Every
// confirmation dialog is accepted, as a person clicking OK would; a
// script error on a page fails the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath
	if p := os.Getenv("SKIPLOCK_CHROMIUM"); p != "" {
		path = p
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the dashboard's browser tests need Chromium at %s (or $SKIPLOCK_CHROMIUM): "+
			"apt-get install chromium (%v)", path, err)
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
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
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

// waitJS polls a JavaScript predicate until it holds, across navigations.
func waitJS(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ok, err := chromedp.Run(ectx, chromedp.Evaluate[bool](js))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s is still false (%v)", what, js, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := b.status(t, id)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %d is %s after 30s, want %s", id, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	path := filepath.Join("..", "..", "docs", "screenshots", name+".png")
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
	b := setup(t, "", ui.Config{Refresh: -1})
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
		ids = append(ids, id)
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
	b := setup(t, "", ui.Config{Refresh: -1})
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

// TestBrowserPages loads every page with realistic data, a real worker
// holding task locks, pauses and resumes a queue, sees a page refresh
// itself, and takes the screenshots of docs/screenshots.
func TestBrowserPages(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	b := setup(t, "", ui.Config{Refresh: time.Second, SampleInterval: 100 * time.Millisecond})
	failedID := b.seed(t)

	do(t, ctx, chromedp.EmulateViewport(1440, 1000))

	do(t, ctx, chromedp.Navigate(b.url+"/"), chromedp.WaitVisible(chromedp.CSS("table.queues")))
	for _, q := range []string{"default", "mail", "reports", "webhooks"} {
		waitJS(t, ctx, "queue "+q, fmt.Sprintf(`[...document.querySelectorAll("table.queues td.name")].some(td => td.textContent.trim().startsWith(%q))`, q))
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("svg.spark path.line").length`); n < 6 {
		t.Errorf("%d sparklines drawn, want charts for every queue", n)
	}
	if got := text(t, ctx, "tr.paused td.name"); !strings.Contains(got, "webhooks") || !strings.Contains(got, "paused") {
		t.Errorf("paused row reads %q, want webhooks marked paused", got)
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
	waitJS(t, ctx, "the refresh to show queue audit", `[...document.querySelectorAll("table.queues td.name")].some(td => td.textContent.trim() === "audit")`)

	do(t, ctx, chromedp.Navigate(b.url+"/tasks"), chromedp.WaitVisible(chromedp.CSS("table.tasks")))
	if n := eval[int](t, ctx, `document.querySelectorAll("table.tasks tbody tr").length`); n != ui.PageSize {
		t.Errorf("tasks page lists %d rows, want %d", n, ui.PageSize)
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
	screenshot(t, ctx, "task")

	do(t, ctx, chromedp.Navigate(b.url+"/locks"), chromedp.WaitVisible(chromedp.CSS("table.workers")))
	if got := text(t, ctx, "table.workers"); !strings.Contains(got, "connected") || !strings.Contains(got, "reports") {
		t.Errorf("workers table reads %q", got)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("table.locks tbody tr").length`); n != 2 {
		t.Errorf("%d task locks listed, want the 2 the worker holds", n)
	}
	screenshot(t, ctx, "locks")

	// The running task's page names its lock holder.
	do(t, ctx, chromedp.Click(chromedp.CSS(`table.locks a`), chromedp.NodeVisible))
	waitJS(t, ctx, "the lock holder", `!!document.querySelector("p.lock") && document.querySelector("p.lock").textContent.includes("registered by worker")`)
}

func (b *bundle) paused(t *testing.T) map[string]bool {
	t.Helper()
	ps, err := b.client.PausedQueues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range ps {
		out[p.Name] = true
	}
	return out
}
