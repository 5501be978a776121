package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock/queue"
)

// requeueReason is recorded in the history of tasks requeued here.
const requeueReason = "requeued from the dashboard"

// done sets a message for the next page and sends the browser back to
// where the form was (its "back" field, a path of this site), or to def.
func (s *Server) done(w http.ResponseWriter, r *http.Request, def, format string, args ...any) {
	http.SetCookie(w, &http.Cookie{
		Name: flashCookie, Value: url.QueryEscape(fmt.Sprintf(format, args...)),
		Path: "/", MaxAge: 60, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	back := r.PostFormValue("back")
	// Only a path of this site: not "//host" nor "/\host", which browsers
	// take for another host.
	if !strings.HasPrefix(back, "/") || strings.HasPrefix(back, "//") || strings.HasPrefix(back, "/\\") {
		back = def
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

func (s *Server) actionFailed(w http.ResponseWriter, r *http.Request, err error) {
	s.failList(w, r, err)
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

func (s *Server) requeueOne(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	res, err := s.client.Requeue(r.Context(), queue.RequeueRequest{
		IDs: []int64{id}, Filter: queue.Filter{Statuses: []queue.Status{queue.StatusFailed, queue.StatusCancelled}},
		Reason: requeueReason,
	})
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	def := fmt.Sprintf("/tasks/%d", id)
	if res.Requeued == 0 {
		s.done(w, r, def, "Task %d was not requeued: only failed and cancelled tasks can be.%s", id, skippedNote(res.Skipped))
		return
	}
	s.done(w, r, def, "Requeued task %d.", id)
}

func (s *Server) cancelOne(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	res, err := s.client.Cancel(r.Context(), queue.CancelRequest{IDs: []int64{id}})
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	def := fmt.Sprintf("/tasks/%d", id)
	if res.Cancelled == 0 {
		s.done(w, r, def, "Task %d was not cancelled: only pending and failed tasks can be.%s", id, skippedNote(res.Skipped))
		return
	}
	s.done(w, r, def, "Cancelled task %d.", id)
}

func (s *Server) cancelRunning(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	running, err := s.client.CancelRunning(r.Context(), []int64{id})
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	def := fmt.Sprintf("/tasks/%d", id)
	if len(running) == 0 {
		s.done(w, r, def, "Task %d is not running; nothing to cancel.", id)
		return
	}
	s.done(w, r, def, "Asked the worker running task %d to cancel it.", id)
}

// requeueMany requeues the checked failed tasks ("id" fields), or, with
// scope=filter, every failed task that matches the form's filter.
func (s *Server) requeueMany(w http.ResponseWriter, r *http.Request) {
	ids, err := formIDs(r)
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	req := queue.RequeueRequest{Reason: requeueReason}
	switch {
	case len(ids) > 0:
		req.IDs = ids
	case r.PostFormValue("scope") == "filter":
		req.Filter = formFilter(r, queue.StatusFailed)
	default:
		s.done(w, r, "/failed", "No tasks selected; nothing was requeued.")
		return
	}
	res, err := s.client.Requeue(r.Context(), req)
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	s.done(w, r, "/failed", "Requeued %d %s.%s", res.Requeued, plural(res.Requeued, "task"), skippedNote(res.Skipped))
}

// cancelMany cancels the checked tasks, or every failed task matching the
// form's filter.
func (s *Server) cancelMany(w http.ResponseWriter, r *http.Request) {
	ids, err := formIDs(r)
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	var req queue.CancelRequest
	switch {
	case len(ids) > 0:
		req.IDs = ids
	case r.PostFormValue("scope") == "filter":
		req.Filter = formFilter(r, queue.StatusFailed)
	default:
		s.done(w, r, "/failed", "No tasks selected; nothing was cancelled.")
		return
	}
	res, err := s.client.Cancel(r.Context(), req)
	if err != nil {
		s.actionFailed(w, r, err)
		return
	}
	s.done(w, r, "/failed", "Cancelled %d %s.%s", res.Cancelled, plural(res.Cancelled, "task"), skippedNote(res.Skipped))
}

func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.client.PauseQueue(r.Context(), name); err != nil {
		s.actionFailed(w, r, err)
		return
	}
	s.depth.invalidate()
	s.done(w, r, "/", "Paused queue %s: workers stop claiming its tasks; running ones finish.", name)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.client.ResumeQueue(r.Context(), name); err != nil {
		s.actionFailed(w, r, err)
		return
	}
	s.depth.invalidate()
	s.done(w, r, "/", "Resumed queue %s.", name)
}
