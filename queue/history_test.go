package queue_test

import (
	"testing"
	"time"

	"github.com/skiplock/skiplock/queue"
)

func TestTaskHistoryAndLastError(t *testing.T) {
	t.Parallel()
	began, ended := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), time.Date(2026, 11, 23, 12, 0, 1, 0, time.UTC)
	errs := []queue.AttemptError{
		{Attempt: 1, Outcome: "error", Error: "smtp: timeout"},
		{Attempt: 1, Outcome: "requeued", Error: "requeued by ops"},
	}
	for _, tc := range []struct {
		status  queue.Status
		current string // the outcome of the attempt the task describes; "" for none
	}{
		{queue.StatusPending, ""},
		{queue.StatusRunning, "running"},
		{queue.StatusCompleted, "completed"},
		{queue.StatusFailed, ""},
	} {
		task := &queue.Task{Status: tc.status, Attempt: 2, WorkerID: "w1", StartedAt: &began, FinishedAt: &ended, Errors: errs}
		h := task.History()
		if got := task.LastError(); got != "smtp: timeout" {
			t.Errorf("%s: LastError = %q, want the error before the requeue note", tc.status, got)
		}
		want := len(errs)
		if tc.current != "" {
			want++
		}
		if len(h) != want || h[0] != errs[0] || h[1] != errs[1] {
			t.Fatalf("%s: history %+v, want the error entries then %d more", tc.status, h, want-len(errs))
		}
		if tc.current == "" {
			continue
		}
		cur := h[len(h)-1]
		if cur.Outcome != tc.current || cur.Attempt != 2 || cur.WorkerID != "w1" || !cur.StartedAt.Equal(began) {
			t.Errorf("%s: current attempt %+v", tc.status, cur)
		}
		if finished := !cur.FinishedAt.IsZero(); finished != (tc.status == queue.StatusCompleted) {
			t.Errorf("%s: current attempt finished at %s", tc.status, cur.FinishedAt)
		}
	}
	if got := (&queue.Task{}).LastError(); got != "" {
		t.Errorf("LastError of a task with no errors = %q", got)
	}
}
