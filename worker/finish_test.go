package worker

import (
	"strings"
	"testing"

	"github.com/skiplock/skiplock/queue"
)

// TestNoHandlerHandsBack: an attempt at a task without a handler (a race
// at most, since claims take only handled names) is never the task's
// fault: even at its last attempt, the task goes back to pending, its
// attempt given back and its place in line kept, and the history says why.
func TestNoHandlerHandsBack(t *testing.T) {
	w := &Worker{cfg: Config{WorkerID: "w1"}}
	e := &execution{task: &Task{ID: 7, Name: "later", Queue: "default", Attempt: 1, MaxAttempts: 1}}
	f := w.finishFor(e, noHandler("later", Handlers{"known": nil}))
	if f.status != queue.StatusPending || f.refund != 1 || f.delayMs != -1 {
		t.Fatalf("finish = status %s, refund %d, delay %d ms; want pending, the attempt given back, run_at kept", f.status, f.refund, f.delayMs)
	}
	if f.entry.Outcome != string(OutcomeNoHandler) || f.entry.Permanent ||
		!strings.Contains(f.entry.Error, `no handler for task name "later"`) || !strings.Contains(f.entry.Error, "it handles: known") {
		t.Fatalf("history entry = %+v", f.entry)
	}
}
