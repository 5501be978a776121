package queue

import (
	"fmt"
	"time"
)

// Phase is what a task is doing, as operators see it: its Status, with a
// pending task told apart by why it waits. Status is the stored column, the
// one the operator methods' filters (Filter.Statuses) and a worker's claim
// go by; Phase is derived from the stored columns (status, run_at, attempt)
// at a given time, never stored: StatusPending splits into PhaseDue,
// PhaseScheduled and PhaseRetrying, and every other status is a phase of
// the same name. The skiplock command and the dashboard show it as the
// task's "state".
type Phase string

const (
	// PhaseDue tasks are pending and due: a worker may claim them now.
	// Shown as "pending".
	PhaseDue Phase = "pending"
	// PhaseRetrying tasks are pending after a failed attempt, waiting out
	// the retry backoff: attempt > 0 and run_at ahead.
	PhaseRetrying Phase = "retrying"
	// PhaseScheduled tasks are pending and enqueued to run later: attempt 0
	// and run_at ahead.
	PhaseScheduled Phase = "scheduled"
	PhaseRunning   Phase = Phase(StatusRunning)
	PhaseCompleted Phase = Phase(StatusCompleted)
	PhaseFailed    Phase = Phase(StatusFailed)
	PhaseCancelled Phase = Phase(StatusCancelled)
)

// Phases lists every phase in life order.
var Phases = []Phase{PhaseWaiting, PhaseScheduled, PhaseDue, PhaseRetrying, PhaseRunning, PhaseCompleted, PhaseFailed, PhaseCancelled}

// PhaseAt is the task's phase at now (run_at is compared with it).
func (t *Task) PhaseAt(now time.Time) Phase {
	if t.Status != StatusPending {
		return Phase(t.Status)
	}
	switch {
	case !t.RunAt.After(now):
		return PhaseDue
	case t.Attempt > 0:
		return PhaseRetrying
	}
	return PhaseScheduled
}

// Phase is the task's phase now.
func (t *Task) Phase() Phase { return t.PhaseAt(time.Now()) }

// FailedPermanently reports whether a failed task failed for good before it
// used all its attempts: its handler returned a worker.Permanent error (or,
// in a history written before workers claimed only the names they handle,
// its worker had no handler for its name). A failed task for which it is
// false ran out of attempts.
func (t *Task) FailedPermanently() bool {
	if t.Status != StatusFailed {
		return false
	}
	for i := len(t.Errors) - 1; i >= 0; i-- {
		e := t.Errors[i]
		if e.Outcome == "requeued" {
			continue
		}
		if e.Permanent || e.Outcome == "no_handler" {
			return true
		}
		break
	}
	return t.Attempt < t.MaxAttempts
}

// Why says in a few words why a task is in its phase, for operators: why a
// failed task failed for good, when a waiting task is due. It is empty when
// the phase says it all.
func (t *Task) Why(now time.Time) string {
	switch t.PhaseAt(now) {
	case PhaseWaiting:
		if t.SequenceKey != "" {
			return fmt.Sprintf("waiting for its turn in sequence %q", t.SequenceKey)
		}
		return fmt.Sprintf("waiting for %d of %d dependencies", t.WaitingFor, len(t.DependsOn))
	case PhaseFailed:
		if t.FailedPermanently() {
			return fmt.Sprintf("permanent error on attempt %d of %d, not retried", t.Attempt, t.MaxAttempts)
		}
		return fmt.Sprintf("out of attempts (%d of %d)", t.Attempt, t.MaxAttempts)
	case PhaseRetrying:
		return fmt.Sprintf("attempt %d of %d failed; retry in %s", t.Attempt, t.MaxAttempts, t.RunAt.Sub(now).Round(time.Second))
	case PhaseScheduled:
		return fmt.Sprintf("runs in %s", t.RunAt.Sub(now).Round(time.Second))
	}
	return ""
}
