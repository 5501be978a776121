package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock/internal/humanize"
	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

// requeueReason is recorded in the history of tasks requeued here.
const requeueReason = "requeued from the dashboard"

// done sets a message for the next page and sends the browser back to
// where the form was (its "back" field, a path under the prefix), or to
// def.
func (h *handler) done(w http.ResponseWriter, r *http.Request, def, format string, args ...any) {
	back := r.PostFormValue("back")
	if !underPrefix(back) {
		back = def
	}
	h.doneAt(w, r, back, format, args...)
}

// underPrefix reports whether back, a form's "back" field, is a clean path
// of the dashboard's: not "//host" nor "/\host", which browsers take for
// another host, nor a path that climbs out of the prefix.
func underPrefix(back string) bool {
	if !strings.HasPrefix(back, "/") || strings.HasPrefix(back, "//") || strings.Contains(back, `\`) {
		return false
	}
	u, err := url.Parse(back)
	return err == nil && u.Scheme == "" && u.Host == "" && path.Clean(u.Path) == u.Path
}

// doneAt is done, sending the browser to to (a path under the prefix)
// whatever the form says.
func (h *handler) doneAt(w http.ResponseWriter, r *http.Request, to, format string, args ...any) {
	http.SetCookie(w, &http.Cookie{
		Name: flashCookie, Value: url.QueryEscape(fmt.Sprintf(format, args...)),
		Path: h.cookiePath(), MaxAge: 60, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, h.opts.Prefix+to, http.StatusSeeOther)
}

func (h *handler) actionFailed(w http.ResponseWriter, r *http.Request, err error) {
	h.failList(w, r, err)
}

// authorize asks Options.Authorize whether r may make a, and returns the
// context to make it with: its actor, for the audit trail. On refusal it
// answers 403 and returns false.
func (h *handler) authorize(w http.ResponseWriter, r *http.Request, a Action) (context.Context, bool) {
	actor := DefaultActor
	if h.opts.Authorize != nil {
		name, err := h.opts.Authorize(r, a)
		if err != nil {
			h.opts.Logger.Info("skiplock dashboard: action refused", "action", a.String(), "error", err)
			h.fail(w, r, http.StatusForbidden, err)
			return nil, false
		}
		if name != "" {
			actor = name
		}
	}
	return queue.WithActor(r.Context(), queue.Actor{Name: actor, Source: queue.SourceDashboard}), true
}

func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: %q is not a task ID", queue.ErrInvalidRequest, r.PathValue("id"))
	}
	return id, nil
}

// formIDs reads the "id" fields of a bulk form.
func formIDs(r *http.Request) ([]int64, error) {
	var ids []int64
	for _, v := range r.PostForm["id"] {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("%w: %q is not a task ID", queue.ErrInvalidRequest, v)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// formFilter reads the filter of a "every matching task" bulk form.
func formFilter(r *http.Request, status queue.Status) queue.Filter {
	f := queue.Filter{Statuses: []queue.Status{status}}
	if q := strings.TrimSpace(r.PostFormValue("queue")); q != "" {
		f.Queues = []string{q}
	}
	if n := strings.TrimSpace(r.PostFormValue("name")); n != "" {
		f.Names = []string{n}
	}
	if e := strings.TrimSpace(r.PostFormValue("q")); e != "" {
		f.ErrorContains = e
	}
	return f
}

func skippedNote(skipped []queue.SkippedTask) string {
	if len(skipped) == 0 {
		return ""
	}
	parts := make([]string, 0, min(len(skipped), 5))
	for _, sk := range skipped[:min(len(skipped), 5)] {
		status := string(sk.Status)
		if status == "" {
			status = "not found"
		}
		parts = append(parts, fmt.Sprintf("%d (%s)", sk.ID, status))
	}
	more := ""
	if len(skipped) > 5 {
		more = fmt.Sprintf(" and %d more", len(skipped)-5)
	}
	return fmt.Sprintf(" Left as they were: %s%s.", strings.Join(parts, ", "), more)
}

func (h *handler) requeueOne(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	ctx, ok := h.authorize(w, r, Action{Kind: queue.AuditRequeue, IDs: []int64{id}})
	if !ok {
		return
	}
	res, err := h.client.Requeue(ctx, queue.RequeueRequest{
		Filter: queue.Filter{IDs: []int64{id}, Statuses: []queue.Status{queue.StatusFailed, queue.StatusCancelled}},
		Reason: requeueReason,
	})
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	def := fmt.Sprintf("/tasks/%d", id)
	if res.Changed == 0 {
		h.done(w, r, def, "Task %d was not requeued: only failed and cancelled tasks can be.%s", id, skippedNote(res.Skipped))
		return
	}
	h.done(w, r, def, "Requeued task %d.", id)
}

func (h *handler) cancelOne(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	ctx, ok := h.authorize(w, r, Action{Kind: queue.AuditCancel, IDs: []int64{id}})
	if !ok {
		return
	}
	res, err := h.client.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{IDs: []int64{id}}})
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	def := fmt.Sprintf("/tasks/%d", id)
	if res.Changed == 0 {
		h.done(w, r, def, "Task %d was not cancelled: only waiting, scheduled, pending, retrying and failed tasks can be.%s", id, skippedNote(res.Skipped))
		return
	}
	h.done(w, r, def, "Cancelled task %d.", id)
}

func (h *handler) cancelRunning(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	ctx, ok := h.authorize(w, r, Action{Kind: queue.AuditCancelRunning, IDs: []int64{id}})
	if !ok {
		return
	}
	res, err := h.client.Cancel(ctx, queue.CancelRequest{
		Filter: queue.Filter{IDs: []int64{id}, Statuses: []queue.Status{queue.StatusRunning}},
	})
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	def := fmt.Sprintf("/tasks/%d", id)
	if len(res.Requested) == 0 {
		h.done(w, r, def, "Task %d is not running; nothing to cancel.", id)
		return
	}
	h.done(w, r, def, "Asked the worker running task %d to cancel it.", id)
}

// requeueMany requeues the checked failed tasks ("id" fields), or, with
// scope=filter, every failed task that matches the form's filter.
func (h *handler) requeueMany(w http.ResponseWriter, r *http.Request) {
	ids, err := formIDs(r)
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	f, action, picked := bulkSelection(r, ids, queue.AuditRequeue)
	if !picked {
		h.done(w, r, "/failed", "No tasks selected; nothing was requeued.")
		return
	}
	req := queue.RequeueRequest{Filter: f, Reason: requeueReason}
	ctx, ok := h.authorize(w, r, action)
	if !ok {
		return
	}
	res, err := h.client.Requeue(ctx, req)
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	h.done(w, r, "/failed", "Requeued %d %s.%s", res.Changed, plural(res.Changed, "task"), skippedNote(res.Skipped))
}

// cancelMany cancels the checked tasks, or every failed task matching the
// form's filter.
func (h *handler) cancelMany(w http.ResponseWriter, r *http.Request) {
	ids, err := formIDs(r)
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	f, action, picked := bulkSelection(r, ids, queue.AuditCancel)
	if !picked {
		h.done(w, r, "/failed", "No tasks selected; nothing was cancelled.")
		return
	}
	req := queue.CancelRequest{Filter: f}
	ctx, ok := h.authorize(w, r, action)
	if !ok {
		return
	}
	res, err := h.client.Cancel(ctx, req)
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	h.done(w, r, "/failed", "Cancelled %d %s.%s", res.Changed, plural(res.Changed, "task"), skippedNote(res.Skipped))
}

// bulkSelection is what a bulk action takes: the checked tasks (ids), or,
// with scope=filter, the failed tasks the form's filter matches, and the
// Action to authorize; picked is false when the form names neither.
func bulkSelection(r *http.Request, ids []int64, kind queue.AuditAction) (f queue.Filter, action Action, picked bool) {
	action = Action{Kind: kind}
	switch {
	case len(ids) > 0:
		f.IDs, action.IDs = ids, ids
	case r.PostFormValue("scope") == "filter":
		f = formFilter(r, queue.StatusFailed)
		action.Filter = &f
	default:
		return f, action, false
	}
	return f, action, true
}

func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func (h *handler) pause(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, ok := h.authorize(w, r, Action{Kind: queue.AuditPause, Queue: name})
	if !ok || !h.knownQueue(w, r, name) {
		return
	}
	if err := h.client.PauseQueue(ctx, name); err != nil {
		h.actionFailed(w, r, err)
		return
	}
	h.done(w, r, "/", "Paused queue %s: workers stop claiming its tasks; running ones finish.", name)
}

func (h *handler) resume(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, ok := h.authorize(w, r, Action{Kind: queue.AuditResume, Queue: name})
	if !ok || !h.knownQueue(w, r, name) {
		return
	}
	if err := h.client.ResumeQueue(ctx, name); err != nil {
		h.actionFailed(w, r, err)
		return
	}
	h.done(w, r, "/", "Resumed queue %s.", name)
}

// scheduleChange pauses, resumes or removes the stored schedule that the
// form's "schedule" field names.
func (h *handler) scheduleChange(kind queue.AuditAction) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PostFormValue("schedule")
		ctx, ok := h.authorize(w, r, Action{Kind: kind, Schedule: name})
		if !ok {
			return
		}
		var err error
		var done string
		switch kind {
		case queue.AuditSchedulePause:
			err, done = h.client.PauseSchedule(ctx, name), "Paused schedule %s: its ticks pass, nothing is enqueued."
		case queue.AuditScheduleResume:
			err, done = h.client.ResumeSchedule(ctx, name), "Resumed schedule %s, from its next tick."
		default:
			err, done = h.client.RemoveSchedule(ctx, name), "Removed schedule %s; the tasks it enqueued stay."
		}
		if errors.Is(err, queue.ErrScheduleNotFound) {
			h.done(w, r, "/periodic", "No stored schedule %s; nothing was changed.", name)
			return
		}
		if err != nil {
			h.actionFailed(w, r, err)
			return
		}
		h.done(w, r, "/periodic", done, name)
	}
}

// knownQueue refuses, as the command does, to pause or resume a queue that
// has no tasks and was never paused: a forged or stale form must not make
// a phantom queue.
func (h *handler) knownQueue(w http.ResponseWriter, r *http.Request, name string) bool {
	known, err := ops.QueueExists(r.Context(), h.client, name)
	if err != nil {
		h.actionFailed(w, r, err)
		return false
	}
	if !known {
		h.done(w, r, "/", "No queue %s: it has no tasks and was never paused; nothing was changed.", name)
	}
	return known
}

// enqueue enqueues a task from the enqueue form, through the same options
// as the command's flags.
func (h *handler) enqueue(w http.ResponseWriter, r *http.Request) {
	f, err := readEnqueueForm(r)
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	ctx, ok := h.authorize(w, r, Action{Kind: queue.AuditEnqueue, Task: f.name, Queue: f.queue})
	if !ok {
		return
	}
	res, err := h.client.Enqueue(ctx, f.name, f.payload, f.opts...)
	var dup *queue.DuplicateError
	if errors.As(err, &dup) && dup.ExistingID != 0 {
		h.doneAt(w, r, fmt.Sprintf("/tasks/%d", dup.ExistingID), "Not enqueued: task %d holds unique key %s.", dup.ExistingID, dup.Key)
		return
	}
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	h.doneAt(w, r, fmt.Sprintf("/tasks/%d", res.ID), "Enqueued task %d.", res.ID)
}

type enqueueForm struct {
	name, queue string
	payload     json.RawMessage
	opts        []queue.Option
}

func readEnqueueForm(r *http.Request) (enqueueForm, error) {
	bad := func(format string, args ...any) (enqueueForm, error) {
		return enqueueForm{}, fmt.Errorf("%w: %s", queue.ErrInvalidTask, fmt.Sprintf(format, args...))
	}
	f := enqueueForm{name: strings.TrimSpace(r.PostFormValue("name")), payload: json.RawMessage("null")}
	if f.name == "" {
		return bad("a task name is required")
	}
	if p := strings.TrimSpace(r.PostFormValue("payload")); p != "" {
		if !json.Valid([]byte(p)) {
			return bad("the payload is not valid JSON")
		}
		f.payload = json.RawMessage(p)
	}
	f.queue = queue.DefaultQueue
	if q := strings.TrimSpace(r.PostFormValue("queue")); q != "" {
		f.queue = q
		f.opts = append(f.opts, queue.WithQueue(q))
	}
	if v := strings.TrimSpace(r.PostFormValue("priority")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return bad("priority %q is not a whole number", v)
		}
		f.opts = append(f.opts, queue.WithPriority(n))
	}
	if v := strings.TrimSpace(r.PostFormValue("max_attempts")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return bad("max attempts %q is not a whole number", v)
		}
		f.opts = append(f.opts, queue.WithMaxAttempts(n))
	}
	if v := strings.TrimSpace(r.PostFormValue("delay")); v != "" {
		d, err := humanize.ParseDuration(v) // the command's syntax: 30s, 10m, 1d
		if err != nil {
			return bad("delay %q is %v", v, err)
		}
		f.opts = append(f.opts, queue.WithDelay(d))
	}
	if v := strings.TrimSpace(r.PostFormValue("unique_key")); v != "" {
		// WithDuplicateError: enqueue reports the holder and the key.
		f.opts = append(f.opts, queue.WithUniqueKey(v), queue.WithDuplicateError())
	}
	if v := strings.TrimSpace(r.PostFormValue("exclusive_key")); v != "" {
		f.opts = append(f.opts, queue.WithExclusiveKey(v))
	}
	return f, nil
}

func (h *handler) runNow(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	ctx, ok := h.authorize(w, r, Action{Kind: queue.AuditRunNow, IDs: []int64{id}})
	if !ok {
		return
	}
	res, err := h.client.RunNow(ctx, []int64{id})
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	def := fmt.Sprintf("/tasks/%d", id)
	if res.Changed == 0 {
		h.done(w, r, def, "Task %d was not changed: only scheduled and retrying tasks wait for a later run time.%s", id, skippedNote(res.Skipped))
		return
	}
	h.done(w, r, def, "Task %d is due now.", id)
}

func (h *handler) deleteOne(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	ctx, ok := h.authorize(w, r, Action{Kind: queue.AuditDelete, IDs: []int64{id}})
	if !ok {
		return
	}
	res, err := h.client.Delete(ctx, []int64{id})
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	if res.Changed == 0 {
		h.done(w, r, fmt.Sprintf("/tasks/%d", id), "Task %d was not deleted: a running task must be cancelled first.%s", id, skippedNote(res.Skipped))
		return
	}
	// Its own page is gone: back to the list.
	h.doneAt(w, r, "/tasks", "Deleted task %d.", id)
}
