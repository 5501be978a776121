package dashboard

import (
	"cmp"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

// One dashboard over several shards: each shard's own dashboard under
// /shards/{n}/, and at the top the pages that read every shard.

// NewSharded returns the dashboard of every shard of sc as one
// http.Handler. Its first page lists the queues of every shard, a row per
// shard and queue, with their totals; its Tasks and Failed pages list the
// tasks of every shard, newest first, each row naming its shard, and its
// bulk requeue and cancel act on every shard (for a filter) or on the
// shards of the tasks picked. Each shard's own dashboard, as New serves
// it, is under /shards/{n}/; a task, workflow or batch ID at the top
// (/tasks/{id}) leads to the page of its shard (queue.ShardOf). A shard
// that cannot be read shows as an error row; the others still show. opts
// are New's and hold for every page and action.
func NewSharded(sc *queue.ShardedClient, opts Options) (http.Handler, error) {
	if sc == nil {
		return nil, errors.New("making the dashboard: a queue.ShardedClient is required")
	}
	shards := sc.Shards()
	first, err := sc.Shard(shards[0])
	if err != nil {
		return nil, err
	}
	top, err := New(first, opts)
	if err != nil {
		return nil, err
	}
	h := top.(*handler)
	h.client = nil // the top reads every shard, through s
	s := &sharded{handler: h, sc: sc, shards: shards, each: map[int]http.Handler{}}
	for _, n := range shards {
		c, err := sc.Shard(n)
		if err != nil {
			return nil, err
		}
		o := h.opts // the defaults filled in, the CSRF token shared
		o.Prefix = shardPrefix(h.opts.Prefix, n)
		one, err := New(c, o)
		if err != nil {
			return nil, err
		}
		oh := one.(*handler)
		if oh.pages, err = parseShardPages(oh.opts.Prefix, pageNames, h.opts.Prefix, n); err != nil {
			return nil, err
		}
		s.each[n] = s.wrongShard(n, http.StripPrefix(fmt.Sprintf("/shards/%d", n), one))
	}
	if h.pages, err = parseShardPages(h.opts.Prefix, shardedPageNames, h.opts.Prefix, 0); err != nil {
		return nil, err
	}
	h.routes = s.mux()
	return h, nil
}

func shardPrefix(prefix string, n int) string { return fmt.Sprintf("%s/shards/%d", prefix, n) }

// sharded is the top of the dashboard over shards; its handler serves
// the headers, the read-only and CSRF checks, rendering and authorizing.
type sharded struct {
	*handler
	sc     *queue.ShardedClient
	shards []int
	each   map[int]http.Handler // each shard's dashboard, its prefix stripped
}

var shardedPageNames = []string{"shards_queues", "shards_tasks", "shards_failed", "shards_pick", "error"}

// parseShardPages parses names as parsePages does, with the header naming
// the shard (n, or every shard for 0) and linking to the top, at top.
func parseShardPages(prefix string, names []string, top string, n int) (map[string]*template.Template, error) {
	fm := template.FuncMap{
		"base":   func() string { return prefix },
		"top":    func() string { return top },
		"shard":  func() int { return n },
		"shardQ": shardQuery,
	}
	out := map[string]*template.Template{}
	for _, name := range names {
		t, err := template.New("layout.html").Funcs(funcs).Funcs(fm).ParseFS(assets, "templates/layout.html", "templates/shards_common.html", "templates/"+name+".html")
		if err == nil {
			t, err = t.Parse(shardNav)
		}
		if err != nil {
			return nil, fmt.Errorf("making the dashboard: parsing template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// shardNav names the shard in the header of every page over shards.
const shardNav = `{{define "shardnav"}}{{if shard}}<span class="shard">shard {{shard}} · <a href="{{top}}/">all shards</a></span>` +
	`{{else}}<a class="shard" href="{{top}}/">all shards</a>{{end}}{{end}}`

func (s *sharded) mux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.queuesPage)
	mux.HandleFunc("GET /tasks", s.tasksPage)
	mux.HandleFunc("GET /failed", s.failedPage)
	for _, kind := range []string{"tasks", "workflows", "batches"} {
		mux.HandleFunc("GET /"+kind+"/{id}", s.toShard(kind))
	}
	for _, page := range []string{"batches", "sequence", "locks", "enqueue", "periodic", "ratelimits", "audit"} {
		mux.HandleFunc("GET /"+page, s.pickShard(page))
	}
	mux.HandleFunc("GET /static/", s.serveStatic)
	mux.HandleFunc("POST /requeue", s.requeueMany)
	mux.HandleFunc("POST /cancel", s.cancelMany)
	mux.HandleFunc("/shards/{n}/", s.toEach)
	return mux
}

// toEach hands a request under /shards/{n}/ to that shard's dashboard.
func (s *sharded) toEach(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.PathValue("n"))
	h, ok := s.each[n]
	if err != nil || !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no shard %q here: this dashboard has shards %s", r.PathValue("n"), s.names()))
		return
	}
	h.ServeHTTP(w, r)
}

func (s *sharded) names() string {
	ns := make([]string, len(s.shards))
	for i, n := range s.shards {
		ns[i] = strconv.Itoa(n)
	}
	return strings.Join(ns, ", ")
}

var idPage = regexp.MustCompile(`^/(tasks|workflows|batches)/([0-9]+)$`)

// wrongShard sends the page of an ID of another shard than n to the top,
// which sends it to its own shard.
func (s *sharded) wrongShard(n int, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest := strings.TrimPrefix(r.URL.Path, fmt.Sprintf("/shards/%d", n))
		if m := idPage.FindStringSubmatch(rest); m != nil && r.Method == http.MethodGet {
			if id, err := strconv.ParseInt(m[2], 10, 64); err == nil && queue.ShardOf(id) != n {
				http.Redirect(w, r, s.opts.Prefix+rest, http.StatusFound)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// toShard sends /{kind}/{id} to the page of the ID's shard.
func (s *sharded) toShard(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil || id <= 0 {
			s.fail(w, r, http.StatusNotFound, fmt.Errorf("%q is not an ID", r.PathValue("id")))
			return
		}
		n := queue.ShardOf(id)
		if _, ok := s.each[n]; !ok {
			s.fail(w, r, http.StatusNotFound, fmt.Errorf("ID %d is of shard %d, which this dashboard does not have: it has shards %s", id, n, s.names()))
			return
		}
		http.Redirect(w, r, fmt.Sprintf("%s/%s/%d", shardPrefix(s.opts.Prefix, n), kind, id), http.StatusFound)
	}
}

// pickShard is a page that each shard has of its own: it links to them.
func (s *sharded) pickShard(page string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		nav := page
		if page == "sequence" {
			nav = "tasks"
		}
		s.render(w, r, http.StatusOK, "shards_pick", pickTitles[page], nav, struct {
			Page   string
			Query  string
			Shards []int
		}{page, r.URL.RawQuery, s.shards})
	}
}

var pickTitles = map[string]string{"batches": "Batches", "sequence": "Sequence", "locks": "Locks & workers", "enqueue": "Enqueue",
	"periodic": "Periodic", "ratelimits": "Limits", "audit": "Audit"}

// shardQuery is "?"+query, or "" for none.
func shardQuery(q string) string {
	if q == "" {
		return ""
	}
	return "?" + q
}

// shardDown is a shard that could not be read.
type shardDown struct {
	Shard int
	Error string
}

func downRow(n int, err error) shardDown {
	return shardDown{n, strings.ReplaceAll(redactPasswords(err.Error()), "skiplock: ", "")}
}

// eachShard runs read on every shard at once and returns, in shard order,
// the shards it failed on, and the errors of each shard (nil for none).
func (s *sharded) eachShard(read func(i, n int, c *queue.Client) error) ([]shardDown, []error) {
	errs := make([]error, len(s.shards))
	var wg sync.WaitGroup
	for i, n := range s.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := s.sc.Shard(n)
			if err == nil {
				err = read(i, n, c)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	var down []shardDown
	for i, err := range errs {
		if err != nil {
			down = append(down, downRow(s.shards[i], err))
		}
	}
	return down, errs
}

// shardQueue is one row of the queues over shards: a queue of one shard.
type shardQueue struct {
	Shard int
	ops.QueueInfo
}

// queueTotal is a queue over every shard.
type queueTotal struct {
	ops.QueueInfo
	Shards      []int // where it is
	PausedOn    []int // the shards where it is paused
	PausedOnAll bool
}

func addQueue(t *ops.QueueInfo, q ops.QueueInfo) {
	t.Pending += q.Pending
	t.Due += q.Due
	t.Retrying += q.Retrying
	t.Scheduled += q.Scheduled
	t.Running += q.Running
	t.Failed += q.Failed
	t.OldestDue = max(t.OldestDue, q.OldestDue)
}

func (s *sharded) queuesPage(w http.ResponseWriter, r *http.Request) {
	per := make([][]ops.QueueInfo, len(s.shards))
	down, _ := s.eachShard(func(i, _ int, c *queue.Client) error {
		var err error
		per[i], err = ops.Queues(r.Context(), c)
		return err
	})
	var rows []shardQueue
	totals := map[string]*queueTotal{}
	var all ops.QueueInfo
	for i, qs := range per {
		for _, q := range qs {
			n := s.shards[i]
			rows = append(rows, shardQueue{n, q})
			t := totals[q.Name]
			if t == nil {
				t = &queueTotal{QueueInfo: ops.QueueInfo{Name: q.Name}}
				totals[q.Name] = t
			}
			addQueue(&t.QueueInfo, q)
			addQueue(&all, q)
			t.Shards = append(t.Shards, n)
			if q.PausedAt != nil {
				t.PausedOn = append(t.PausedOn, n)
			}
		}
	}
	var byQueue []queueTotal
	for _, t := range totals {
		t.PausedOnAll = len(t.PausedOn) > 0 && len(t.PausedOn) == len(t.Shards)
		byQueue = append(byQueue, *t)
	}
	slices.SortFunc(byQueue, func(a, b queueTotal) int { return cmp.Compare(a.Name, b.Name) })
	s.render(w, r, http.StatusOK, "shards_queues", "Queues", "queues", struct {
		Shards []int
		Totals []queueTotal
		All    ops.QueueInfo
		Rows   []shardQueue
		Down   []shardDown
	}{s.shards, byQueue, all, rows, down})
}

// shardTask is one row of the tasks over shards.
type shardTask struct {
	Shard int
	*queue.Task
}

// shardedList is the tasks and failed pages' data over shards.
type shardedList struct {
	*listView
	Rows []shardTask
	Down []shardDown
}

// Any reports whether the page lists a task of any shard; Sharded is true
// (templates' "failedpage").
func (v *shardedList) Any() bool     { return len(v.Rows) > 0 }
func (v *shardedList) Sharded() bool { return true }

// listTasks reads one page of tasks of every shard for the filter in r's
// query, newest first. Its cursor, "before", holds the last task shown of
// each shard ("1:812,2:790"): every shard's page is read by ID, as a
// single dashboard's, so that paging misses and repeats nothing however
// the shards' clocks and IDs compare.
func (s *sharded) listTasks(r *http.Request, status string) (*shardedList, error) {
	cursors := map[int]int64{}
	if b := r.URL.Query().Get("before"); b != "" {
		for _, part := range strings.Split(b, ",") {
			ns, ids, ok := strings.Cut(part, ":")
			n, err1 := strconv.Atoi(ns)
			id, err2 := strconv.ParseInt(ids, 10, 64)
			if _, known := s.each[n]; !ok || err1 != nil || err2 != nil || id <= 0 || !known {
				return nil, fmt.Errorf("%w: before must list shard:ID pairs of shards %s, got %q", queue.ErrInvalidRequest, s.names(), b)
			}
			cursors[n] = id
		}
	}
	views := make([]*listView, len(s.shards))
	down, errs := s.eachShard(func(i, n int, c *queue.Client) error {
		one := &handler{opts: s.opts, client: c}
		sub := r.Clone(r.Context())
		q := sub.URL.Query()
		q.Del("before")
		if id, ok := cursors[n]; ok {
			q.Set("before", strconv.FormatInt(id, 10))
		}
		sub.URL.RawQuery = q.Encode()
		var err error
		views[i], err = one.listTasks(sub, status)
		return err
	})
	for _, err := range errs {
		if errors.Is(err, queue.ErrInvalidRequest) {
			return nil, err // the filter's, the same on every shard
		}
	}
	out := &shardedList{Down: down}
	more := false
	for _, v := range views {
		if v == nil {
			continue
		}
		if out.listView == nil {
			cp := *v
			out.listView = &cp
			out.Queues, out.Names = nil, nil
		}
		out.Queues = append(out.Queues, v.Queues...)
		out.Names = append(out.Names, v.Names...)
		more = more || v.NextURL != ""
	}
	if out.listView == nil { // no shard answered
		out.listView = &listView{Status: status}
		if status == "" {
			out.Status = r.URL.Query().Get("status")
		}
		return out, nil
	}
	slices.Sort(out.Queues)
	out.Queues = slices.Compact(out.Queues)
	slices.Sort(out.Names)
	out.Names = slices.Compact(out.Names)

	// Merge newest first, each shard's tasks in their own order.
	next := make([]int, len(views))
	for len(out.Rows) < PageSize {
		best := -1
		for i, v := range views {
			if v == nil || next[i] >= len(v.Tasks) {
				continue
			}
			if best < 0 || v.Tasks[next[i]].CreatedAt.After(views[best].Tasks[next[best]].CreatedAt) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		t := views[best].Tasks[next[best]]
		out.Rows = append(out.Rows, shardTask{s.shards[best], t})
		cursors[s.shards[best]] = t.ID
		next[best]++
	}
	for i, v := range views {
		more = more || (v != nil && next[i] < len(v.Tasks))
	}
	out.Tasks, out.NextURL, out.FirstURL = nil, "", ""
	if more {
		parts := make([]string, 0, len(cursors))
		for _, n := range s.shards {
			if id, ok := cursors[n]; ok {
				parts = append(parts, fmt.Sprintf("%d:%d", n, id))
			}
		}
		out.NextURL = s.pageURL(r, "before", strings.Join(parts, ","))
	}
	if r.URL.Query().Get("before") != "" {
		out.FirstURL = s.pageURL(r, "before", "")
	}
	return out, nil
}

func (s *sharded) tasksPage(w http.ResponseWriter, r *http.Request) {
	v, err := s.listTasks(r, "")
	if err != nil {
		s.failList(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "shards_tasks", "Tasks", "tasks", v)
}

func (s *sharded) failedPage(w http.ResponseWriter, r *http.Request) {
	v, err := s.listTasks(r, string(queue.StatusFailed))
	if err != nil {
		s.failList(w, r, err)
		return
	}
	v.Select = !s.opts.ReadOnly
	s.render(w, r, http.StatusOK, "shards_failed", "Failed tasks", "failed", v)
}

// bulkIDs reads the IDs of a bulk form, each of a shard of this dashboard.
func (s *sharded) bulkIDs(r *http.Request) ([]int64, error) {
	ids, err := formIDs(r)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if n := queue.ShardOf(id); s.each[n] == nil {
			return nil, fmt.Errorf("%w: task %d is of shard %d, which this dashboard does not have: it has shards %s", queue.ErrInvalidRequest, id, n, s.names())
		}
	}
	return ids, nil
}

// partly is what a change that failed on some shards says of them.
func partly(err error) string {
	if err == nil {
		return ""
	}
	return " Not on every shard: " + strings.ReplaceAll(redactPasswords(err.Error()), "skiplock: ", "")
}

// requeueMany requeues the checked failed tasks on their shards, or, with
// scope=filter, every failed task that matches the form's filter on every
// shard: one change, and one audit record, per shard.
func (s *sharded) requeueMany(w http.ResponseWriter, r *http.Request) {
	ids, err := s.bulkIDs(r)
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	f, action, picked := bulkSelection(r, ids, queue.AuditRequeue)
	if !picked {
		s.done(w, r, "/failed", "No tasks selected; nothing was requeued.")
		return
	}
	req := queue.RequeueRequest{Filter: f, Reason: requeueReason}
	ctx, ok := s.authorize(w, r, action)
	if !ok {
		return
	}
	res, err := s.sc.Requeue(ctx, req)
	if err != nil && res.Changed == 0 && len(res.Skipped) == 0 {
		s.actionFailed(w, r, err)
		return
	}
	s.done(w, r, "/failed", "Requeued %d %s.%s%s", res.Changed, plural(res.Changed, "task"), skippedNote(res.Skipped), partly(err))
}

// cancelMany cancels the checked tasks on their shards, or every failed
// task matching the form's filter on every shard.
func (s *sharded) cancelMany(w http.ResponseWriter, r *http.Request) {
	ids, err := s.bulkIDs(r)
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	f, action, picked := bulkSelection(r, ids, queue.AuditCancel)
	if !picked {
		s.done(w, r, "/failed", "No tasks selected; nothing was cancelled.")
		return
	}
	req := queue.CancelRequest{Filter: f}
	ctx, ok := s.authorize(w, r, action)
	if !ok {
		return
	}
	res, err := s.sc.Cancel(ctx, req)
	if err != nil && res.Changed == 0 && len(res.Skipped) == 0 {
		s.actionFailed(w, r, err)
		return
	}
	s.done(w, r, "/failed", "Cancelled %d %s.%s%s", res.Changed, plural(res.Changed, "task"), skippedNote(res.Skipped), partly(err))
}
