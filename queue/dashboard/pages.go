package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

// page is what every template gets: the shell's fields and the page's own
// Data.
type page struct {
	Title    string
	Nav      string
	CSRF     string
	Refresh  int // seconds; 0 for none
	Flash    string
	Path     string // the request's path and query under the prefix, to come back to after a POST
	ReadOnly bool   // no action is shown
	Data     any
}

var funcs = template.FuncMap{
	"ago": func(t any) string {
		var at time.Time
		switch v := t.(type) {
		case time.Time:
			at = v
		case *time.Time:
			if v == nil {
				return "-"
			}
			at = *v
		}
		if at.IsZero() {
			return "-"
		}
		d := time.Since(at)
		if d < 0 {
			return "in " + short(-d)
		}
		return short(d) + " ago"
	},
	"short": short,
	// when is a time for people, in the server's zone, named.
	"when": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "-"
			}
			return v.Local().Format(timeLayout)
		case *time.Time:
			if v == nil || v.IsZero() {
				return "-"
			}
			return v.Local().Format(timeLayout)
		}
		return "-"
	},
	"why":       func(t *queue.Task) string { return t.Why(time.Now()) },
	"permanent": func(t *queue.Task) bool { return t.FailedPermanently() },
	// later: a pending task whose run time is ahead, which Run now makes due.
	"later": func(t *queue.Task) bool {
		return t.Status == queue.StatusRetrying || t.Status == queue.StatusScheduled
	},
	"chart": func(completed, failed []float64, since time.Time) template.HTML {
		return barChart(completed, failed, since, smallChart, "tasks completed and failed per minute over the last hour")
	},
	"iso":  func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"clip": clip,
	// encrypted is "encrypted (key ID)" for an encrypted payload, which
	// the dashboard cannot read; "" for one in clear.
	"encrypted": func(raw json.RawMessage) string {
		kid, ok := queue.EncryptedKeyID(raw)
		switch {
		case !ok:
			return ""
		case kid == "":
			return "encrypted (malformed envelope)"
		}
		return "encrypted (key " + kid + ")"
	},
	"pretty": func(raw json.RawMessage) string {
		var b bytes.Buffer
		if json.Indent(&b, raw, "", "  ") != nil {
			return string(raw)
		}
		return b.String()
	},
	"count": func(n int64) string {
		s := strconv.FormatInt(n, 10)
		for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	},
	"pct": func(f float64) string {
		if math.IsNaN(f) {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*f)
	},
	"rate": func(f float64) string {
		switch {
		case f == 0:
			return "0"
		case f < 10:
			return fmt.Sprintf("%.1f", f)
		}
		return fmt.Sprintf("%.0f", f)
	},
	"statuses": func() []queue.Status { return queue.Statuses },
	"join":     strings.Join,
	"firstLine": func(s string) string {
		line, _, _ := strings.Cut(s, "\n")
		return line
	},
}

func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && s[i]&0xc0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}

// timeLayout shows times to the second with their zone.
const timeLayout = "2006-01-02 15:04:05 MST"

var pageNames = []string{"queues", "tasks", "task", "workflow", "batches", "batch", "sequence", "failed", "locks", "enqueue", "periodic", "ratelimits", "audit", "error"}

// parsePages parses every page, whose links begin with {{base}}: prefix.
func parsePages(prefix string) (map[string]*template.Template, error) {
	fm := template.FuncMap{"base": func() string { return prefix }}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).Funcs(fm).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("making the dashboard: parsing template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

const flashCookie = "skiplock_flash"

func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name, title, nav string, data any) {
	p := page{Title: title, Nav: nav, CSRF: h.csrf, Data: data, Path: r.URL.RequestURI(), ReadOnly: h.opts.ReadOnly}
	if h.opts.Refresh > 0 && name != "error" {
		p.Refresh = max(int(h.opts.Refresh.Seconds()), 1)
	}
	if c, err := r.Cookie(flashCookie); err == nil {
		p.Flash, _ = url.QueryUnescape(c.Value)
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: h.cookiePath(), MaxAge: -1})
	}
	var buf bytes.Buffer
	if err := h.pages[name].Execute(&buf, p); err != nil {
		h.opts.Logger.Error("skiplock dashboard: rendering", "page", name, "error", err)
		http.Error(w, "500 internal error rendering the page", http.StatusInternalServerError)
		return
	}
	if !h.opts.ReadOnly {
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: h.csrf, Path: h.cookiePath(), HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders an error page; err's text is shown as it is (escaped),
// with any database password masked.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	msg := redactPasswords(err.Error())
	if status >= 500 {
		h.opts.Logger.Error("skiplock dashboard", "path", r.URL.Path, "error", msg)
	}
	h.render(w, r, status, "error", http.StatusText(status), "", struct {
		Status  int
		Message string
	}{status, strings.ReplaceAll(msg, "skiplock: ", "")})
}

// Passwords as connection strings hold them: postgres://user:PASSWORD@host,
// password=PASSWORD, password='PASS WORD'.
var (
	urlPassword = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://[^:/?#@\s]*:)[^@\s]*@`)
	kvPassword  = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'"&]+)`)
)

// redactPasswords masks the passwords of the connection strings in s: a
// driver's or an application's error may quote one, and a page must not.
func redactPasswords(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}xxxxx@")
	return kvPassword.ReplaceAllString(s, "${1}xxxxx")
}

// queueView is one row of the queues page.
type queueView struct {
	ops.QueueInfo
	DonePerMin   float64 // over the last 15 minutes
	FailureRate  float64 // over the last 15 minutes; NaN when nothing finished
	Completed    []float64
	FailedSeries []float64
}

func (h *handler) queuesPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	queues, err := ops.Queues(ctx, h.client)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	tp, err := h.readThroughput(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	unhandled, err := h.unhandled.get(func() ([]ops.UnhandledTasks, error) { return ops.Unhandled(ctx, h.client) })
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	totalDone, totalFailed := make([]float64, chartBuckets), make([]float64, chartBuckets)
	views := make([]queueView, 0, len(queues))
	for _, q := range queues {
		done, failed := tp.completed[q.Name], tp.failed[q.Name]
		if done == nil {
			done = make([]float64, chartBuckets)
		}
		if failed == nil {
			failed = make([]float64, chartBuckets)
		}
		var done15, failed15 float64
		for i := range done {
			totalDone[i] += done[i]
			totalFailed[i] += failed[i]
			if i >= chartBuckets-15 {
				done15 += done[i]
				failed15 += failed[i]
			}
		}
		v := queueView{QueueInfo: q, DonePerMin: done15 / 15, FailureRate: math.NaN(), Completed: done, FailedSeries: failed}
		if done15+failed15 > 0 {
			v.FailureRate = failed15 / (done15 + failed15)
		}
		views = append(views, v)
	}
	h.render(w, r, http.StatusOK, "queues", "Queues", "queues", struct {
		Queues    []queueView
		Unhandled []ops.UnhandledTasks // pending tasks no live worker handles
		Since     time.Time
		Chart     template.HTML
	}{views, unhandled, tp.since, barChart(totalDone, totalFailed, tp.since, bigChart, "tasks completed and failed per minute over the last hour, every queue")})
}

// listView is the tasks and failed pages' data.
type listView struct {
	Status   string
	Queue    string
	Name     string
	Search   string
	Queues   []string // the filter's choices
	Names    []string
	Before   int64
	Tasks    []*queue.Task
	Select   bool // rows have checkboxes for the bulk forms
	NextURL  string
	FirstURL string
}

// Any reports whether the page lists a task; Sharded is false: the page
// is one database's (templates' "failedpage").
func (v *listView) Any() bool     { return len(v.Tasks) > 0 }
func (v *listView) Sharded() bool { return false }

// pageURL is the URL of r's page, under the prefix, with the query
// parameter key set to value (removed when value is empty).
func (h *handler) pageURL(r *http.Request, key, value string) string {
	q := r.URL.Query()
	if value == "" {
		q.Del(key)
	} else {
		q.Set(key, value)
	}
	u := h.opts.Prefix + r.URL.Path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// listTasks reads one page of tasks for the filter in r's query; status,
// when not empty, is fixed.
func (h *handler) listTasks(r *http.Request, status string) (*listView, error) {
	q := r.URL.Query()
	v := &listView{Status: status, Queue: strings.TrimSpace(q.Get("queue")), Name: strings.TrimSpace(q.Get("name")),
		Search: strings.TrimSpace(q.Get("q"))}
	if v.Status == "" {
		v.Status = q.Get("status")
	}
	var f queue.Filter
	page := queue.Page{Limit: PageSize + 1}
	if v.Status != "" {
		f.Statuses = []queue.Status{queue.Status(v.Status)}
	}
	if v.Queue != "" {
		f.Queues = []string{v.Queue}
	}
	if v.Name != "" {
		f.Names = []string{v.Name}
	}
	if v.Search != "" {
		if id, err := strconv.ParseInt(strings.TrimPrefix(v.Search, "#"), 10, 64); err == nil && id > 0 {
			f.IDs = []int64{id}
		} else {
			f.ErrorContains = v.Search
		}
	}
	if b := q.Get("before"); b != "" {
		id, err := strconv.ParseInt(b, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("%w: before must be a task ID, got %q", queue.ErrInvalidRequest, b)
		}
		page.BeforeID, v.Before = id, id
	}
	tasks, err := h.client.List(r.Context(), f, page)
	if err != nil {
		return nil, err
	}
	if len(tasks) > PageSize {
		tasks = tasks[:PageSize]
		v.NextURL = h.pageURL(r, "before", strconv.FormatInt(tasks[len(tasks)-1].ID, 10))
	}
	if v.Before != 0 {
		v.FirstURL = h.pageURL(r, "before", "")
	}
	v.Tasks = tasks
	if v.Queues, v.Names, err = h.choices(r.Context(), v.Queue, v.Name); err != nil {
		return nil, err
	}
	return v, nil
}

// choices are the queue and name filters' options: the known queues and
// the names of recent tasks, with the current ones kept in.
func (h *handler) choices(ctx context.Context, curQueue, curName string) (queues, names []string, err error) {
	qs, err := ops.Queues(ctx, h.client)
	if err != nil {
		return nil, nil, err
	}
	for _, q := range qs {
		queues = append(queues, q.Name)
	}
	if names, err = ops.TaskNames(ctx, h.client); err != nil {
		return nil, nil, err
	}
	if curQueue != "" && !slices.Contains(queues, curQueue) {
		queues = append(queues, curQueue)
	}
	if curName != "" && !slices.Contains(names, curName) {
		names = append(names, curName)
	}
	return queues, names, nil
}

func (h *handler) tasksPage(w http.ResponseWriter, r *http.Request) {
	v, err := h.listTasks(r, "")
	if err != nil {
		h.failList(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "tasks", "Tasks", "tasks", v)
}

func (h *handler) failedPage(w http.ResponseWriter, r *http.Request) {
	v, err := h.listTasks(r, string(queue.StatusFailed))
	if err != nil {
		h.failList(w, r, err)
		return
	}
	v.Select = !h.opts.ReadOnly
	h.render(w, r, http.StatusOK, "failed", "Failed tasks", "failed", v)
}

func (h *handler) failList(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, queue.ErrInvalidRequest), errors.Is(err, queue.ErrInvalidTask):
		status = http.StatusBadRequest
	case errors.Is(err, queue.ErrDuplicate):
		status = http.StatusConflict
	case errors.Is(err, queue.ErrPermissionDenied):
		// The dashboard's role may not do this (an observer's): the
		// message says which privilege is missing.
		status = http.StatusForbidden
	}
	h.fail(w, r, status, err)
}

// attemptRow is one attempt on a task's page.
type attemptRow struct {
	queue.AttemptError
	Current bool
}

func (h *handler) taskPage(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("%q is not a task ID", r.PathValue("id")))
		return
	}
	t, err := h.client.Get(r.Context(), id)
	if errors.Is(err, queue.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no task %d (purged, or never enqueued)", id))
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	var holder *ops.TaskLock
	if t.Status == queue.StatusRunning {
		if holder, err = ops.LockHolder(r.Context(), h.client, id); err != nil {
			h.fail(w, r, http.StatusInternalServerError, err)
			return
		}
	}
	history := t.History()
	attempts := make([]attemptRow, len(history))
	for i, a := range history {
		attempts[i] = attemptRow{AttemptError: a, Current: i >= len(t.Errors)}
	}
	slices.Reverse(attempts) // latest first
	h.render(w, r, http.StatusOK, "task", fmt.Sprintf("Task %d", id), "tasks", struct {
		Task     *queue.Task
		Holder   *ops.TaskLock
		Attempts []attemptRow
	}{t, holder, attempts})
}

// workflowNode is one task on a workflow's page.
type workflowNode struct {
	*queue.Task
	Step  string
	Why   string
	After []string // the labels of the tasks it depends on
}

func (h *handler) workflowPage(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("%q is not a workflow ID", r.PathValue("id")))
		return
	}
	wf, err := h.client.GetWorkflow(r.Context(), id)
	if errors.Is(err, queue.ErrWorkflowNotFound) {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no workflow %d", id))
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	now := time.Now()
	counts := map[queue.Status]int{}
	var levels [][]workflowNode
	for _, tasks := range wf.Levels() {
		var nodes []workflowNode
		for _, t := range tasks {
			n := workflowNode{Task: t, Step: wf.Steps[t.ID], Why: t.Why(now)}
			if t.Status == queue.StatusCancelled && len(t.Errors) > 0 {
				n.Why = t.Errors[len(t.Errors)-1].Error
			}
			for _, d := range t.DependsOn {
				n.After = append(n.After, wf.Label(d))
			}
			counts[t.Status]++
			nodes = append(nodes, n)
		}
		levels = append(levels, nodes)
	}
	var summary []string
	for _, st := range queue.Statuses {
		if counts[st] > 0 {
			summary = append(summary, fmt.Sprintf("%d %s", counts[st], st))
		}
	}
	title := fmt.Sprintf("Workflow %d", id)
	h.render(w, r, http.StatusOK, "workflow", title, "tasks", struct {
		Workflow *queue.WorkflowInfo
		Levels   [][]workflowNode
		Summary  string
	}{wf, levels, strings.Join(summary, ", ")})
}

// batchStates are the states the batches page filters by.
var batchStates = []string{"running", "finished"}

func (h *handler) batchesPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := queue.BatchFilter{State: q.Get("state"), Limit: PageSize + 1}
	if b := q.Get("before"); b != "" {
		id, err := strconv.ParseInt(b, 10, 64)
		if err != nil || id <= 0 {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("before must be a batch ID, got %q", b))
			return
		}
		f.BeforeID = id
	}
	batches, err := h.client.ListBatches(r.Context(), f)
	if err != nil {
		h.failList(w, r, err)
		return
	}
	v := struct {
		State    string
		States   []string
		Rows     []*queue.BatchInfo
		NextURL  string
		FirstURL string
	}{State: f.State, States: batchStates, Rows: batches}
	if len(batches) > PageSize {
		v.Rows = batches[:PageSize]
		v.NextURL = h.pageURL(r, "before", strconv.FormatInt(v.Rows[len(v.Rows)-1].ID, 10))
	}
	if f.BeforeID != 0 {
		v.FirstURL = h.pageURL(r, "before", "")
	}
	h.render(w, r, http.StatusOK, "batches", "Batches", "batches", v)
}

// batchRow is one task on a batch's page.
type batchRow struct {
	*queue.Task
	Role string // member, on finish, on success
	Why  string
}

func (h *handler) batchPage(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("%q is not a batch ID", r.PathValue("id")))
		return
	}
	b, err := h.client.GetBatch(r.Context(), id)
	if errors.Is(err, queue.ErrBatchNotFound) {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no batch %d", id))
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	tasks, err := h.client.BatchTasks(r.Context(), id)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	now := time.Now()
	rows := make([]batchRow, 0, len(tasks))
	stored := b.Total
	if b.OnFinishTaskID != 0 {
		stored++
	}
	if b.OnSuccessTaskID != 0 {
		stored++
	}
	for _, t := range tasks {
		row := batchRow{Task: t, Role: "member", Why: t.Why(now)}
		switch t.ID {
		case b.OnFinishTaskID:
			row.Role = "on finish"
		case b.OnSuccessTaskID:
			row.Role = "on success"
		}
		if (t.Status == queue.StatusCancelled || t.Status == queue.StatusFailed) && len(t.Errors) > 0 {
			row.Why = t.Errors[len(t.Errors)-1].Error
		}
		rows = append(rows, row)
	}
	h.render(w, r, http.StatusOK, "batch", fmt.Sprintf("Batch %d", id), "batches", struct {
		Batch *queue.BatchInfo
		Rows  []batchRow
		Gone  int
	}{b, rows, stored - len(tasks)})
}

// sequenceRow is one task on a sequence's page.
type sequenceRow struct {
	*queue.Task
	Why  string
	Head bool
}

// sequencePage shows the tasks of the sequence ?key= in order. The key is a
// query parameter, not a path segment: keys hold slashes and colons.
func (h *handler) sequencePage(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	seq, err := h.client.GetSequence(r.Context(), key)
	switch {
	case errors.Is(err, queue.ErrSequenceNotFound):
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no task has sequence key %q (finished and purged, or never enqueued)", key))
		return
	case errors.Is(err, queue.ErrInvalidRequest):
		h.fail(w, r, http.StatusBadRequest, err)
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	now := time.Now()
	var rows []sequenceRow
	var head *queue.Task
	for _, t := range seq.Tasks {
		row := sequenceRow{Task: t, Why: t.Why(now), Head: t.ID == seq.Head}
		if (t.Status == queue.StatusFailed || t.Status == queue.StatusCancelled) && t.LastError() != "" {
			row.Why = t.LastError()
		}
		if row.Head {
			head = t
		}
		rows = append(rows, row)
	}
	total, summary := seq.Summary()
	h.render(w, r, http.StatusOK, "sequence", "Sequence "+key, "tasks", struct {
		Sequence *queue.SequenceInfo
		Rows     []sequenceRow
		Head     *queue.Task
		Total    int64
		Summary  string
	}{seq, rows, head, total, summary})
}

func (h *handler) locksPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	workers, forgotten, err := ops.Workers(ctx, h.client)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	locks, err := ops.Locks(ctx, h.client)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	waits, err := ops.LockWaits(ctx, h.client)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.render(w, r, http.StatusOK, "locks", "Locks and workers", "locks", struct {
		Workers     []ops.WorkerInfo
		Forgotten   int
		GoneAfter   time.Duration
		ForgetAfter time.Duration
		Locks       []ops.TaskLock
		Waits       []ops.LockWait
	}{workers, forgotten, ops.WorkerGoneAfter, ops.WorkerForgetAfter, locks, waits})
}

func (h *handler) enqueuePage(w http.ResponseWriter, r *http.Request) {
	if h.opts.ReadOnly {
		h.fail(w, r, http.StatusForbidden, errReadOnly)
		return
	}
	queues, names, err := h.choices(r.Context(), "", "")
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.render(w, r, http.StatusOK, "enqueue", "Enqueue a task", "enqueue", struct {
		Queues      []string
		Names       []string
		MaxAttempts int
	}{queues, names, queue.DefaultMaxAttempts})
}

func (h *handler) periodicPage(w http.ResponseWriter, r *http.Request) {
	schedules, err := ops.PeriodicSchedules(r.Context(), h.client)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	stored, err := h.client.Schedules(r.Context())
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.render(w, r, http.StatusOK, "periodic", "Periodic schedules", "periodic", struct {
		Stored    []queue.Schedule
		Schedules []ops.PeriodicSchedule
	}{stored, schedules})
}

func (h *handler) rateLimitsPage(w http.ResponseWriter, r *http.Request) {
	limits, err := ops.RateLimits(r.Context(), h.client)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	concurrency, err := h.client.Limits(r.Context())
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	keyed, err := ops.RateKeys(r.Context(), h.client)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.render(w, r, http.StatusOK, "ratelimits", "Limits", "ratelimits", struct {
		Limits      []ops.RateLimitUsage
		Keyed       []ops.RateKeyUsage
		Concurrency []queue.Limit
	}{limits, keyed, concurrency})
}

// errReadOnly is the error of an action in read-only mode.
var errReadOnly = errors.New("this dashboard is read-only")

// auditRow is one record on the audit page.
type auditRow struct {
	queue.AuditEntry
	Request string // compact, for a table cell
}

// auditPage lists the audit trail's records, the newest first, filtered by
// action and actor, paged by ID.
func (h *handler) auditPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := queue.AuditFilter{Action: queue.AuditAction(q.Get("action")), Actor: strings.TrimSpace(q.Get("actor")), Limit: PageSize + 1}
	if b := q.Get("before"); b != "" {
		id, err := strconv.ParseInt(b, 10, 64)
		if err != nil || id <= 0 {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("before must be a record ID, got %q", b))
			return
		}
		f.BeforeID = id
	}
	entries, err := h.client.AuditLog(r.Context(), f)
	if err != nil {
		h.failList(w, r, err)
		return
	}
	v := struct {
		Action   string
		Actor    string
		Actions  []queue.AuditAction
		Rows     []auditRow
		NextURL  string
		FirstURL string
	}{Action: string(f.Action), Actor: f.Actor, Actions: queue.AuditActions}
	if len(entries) > PageSize {
		entries = entries[:PageSize]
		v.NextURL = h.pageURL(r, "before", strconv.FormatInt(entries[len(entries)-1].ID, 10))
	}
	if f.BeforeID != 0 {
		v.FirstURL = h.pageURL(r, "before", "")
	}
	for _, e := range entries {
		var b bytes.Buffer
		if json.Compact(&b, e.Request) != nil {
			b.Reset()
			b.Write(e.Request)
		}
		v.Rows = append(v.Rows, auditRow{AuditEntry: e, Request: redactPasswords(b.String())})
	}
	h.render(w, r, http.StatusOK, "audit", "Audit trail", "audit", v)
}
