package queue

import (
	"fmt"
	"time"
)

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

// Why says in a few words why a task is in its status, for operators: why
// a failed task failed for good, what a waiting task waits for, when a
// scheduled or retrying task is due (counted from now). It is empty when
// the status says it all.
func (t *Task) Why(now time.Time) string {
	switch t.Status {
	case StatusWaiting:
		if t.SequenceKey != "" {
			return fmt.Sprintf("waiting for its turn in sequence %q", t.SequenceKey)
		}
		return fmt.Sprintf("waiting for %d of %d dependencies", t.WaitingFor, len(t.DependsOn))
	case StatusFailed:
		if t.FailedPermanently() {
			return fmt.Sprintf("permanent error on attempt %d of %d, not retried", t.Attempt, t.MaxAttempts)
		}
		return fmt.Sprintf("out of attempts (%d of %d)", t.Attempt, t.MaxAttempts)
	case StatusRetrying:
		return fmt.Sprintf("attempt %d of %d failed; retry in %s", t.Attempt, t.MaxAttempts, t.RunAt.Sub(now).Round(time.Second))
	case StatusScheduled:
		return fmt.Sprintf("runs in %s", t.RunAt.Sub(now).Round(time.Second))
	}
	return ""
}
