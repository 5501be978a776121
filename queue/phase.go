package queue

import (
	"fmt"
	"time"
)

// State is what a task is doing, as operators see it: its Status, with a
// pending task told apart by why it waits. It is derived from the stored
// columns (status, run_at, attempt), never stored.
type State string

const (
	// StateDue tasks are pending and due: a worker may claim them now.
	// Shown as "pending".
	StateDue State = "pending"
	// StateRetrying tasks are pending after a failed attempt, waiting out
	// the retry backoff: attempt > 0 and run_at ahead.
	StateRetrying State = "retrying"
	// StateScheduled tasks are pending and enqueued to run later: attempt 0
	// and run_at ahead.
	StateScheduled State = "scheduled"
	StateRunning   State = State(StatusRunning)
	StateCompleted State = State(StatusCompleted)
	StateFailed    State = State(StatusFailed)
	StateCancelled State = State(StatusCancelled)
)

// States lists every state in life order.
var States = []State{StateWaiting, StateScheduled, StateDue, StateRetrying, StateRunning, StateCompleted, StateFailed, StateCancelled}

// StateAt is the task's state at now (run_at is compared with it).
func (t *Task) StateAt(now time.Time) State {
	if t.Status != StatusPending {
		return State(t.Status)
	}
	switch {
	case !t.RunAt.After(now):
		return StateDue
	case t.Attempt > 0:
		return StateRetrying
	}
	return StateScheduled
}

// State is the task's state now.
func (t *Task) State() State { return t.StateAt(time.Now()) }

// FailedPermanently reports whether a failed task failed for good before it
// used all its attempts: its handler returned a worker.Permanent error, or
// no worker had a handler for its name. A failed task for which it is false
// ran out of attempts.
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

// Why says in a few words why a task is in its state, for operators: why a
// failed task failed for good, when a waiting task is due. It is empty when
// the state says it all.
func (t *Task) Why(now time.Time) string {
	switch t.StateAt(now) {
	case StateWaiting:
		if t.SequenceKey != "" {
			return fmt.Sprintf("waiting for its turn in sequence %q", t.SequenceKey)
		}
		return fmt.Sprintf("waiting for %d of %d dependencies", t.WaitingFor, len(t.DependsOn))
	case StateFailed:
		if t.FailedPermanently() {
			return fmt.Sprintf("permanent error on attempt %d of %d, not retried", t.Attempt, t.MaxAttempts)
		}
		return fmt.Sprintf("out of attempts (%d of %d)", t.Attempt, t.MaxAttempts)
	case StateRetrying:
		return fmt.Sprintf("attempt %d of %d failed; retry in %s", t.Attempt, t.MaxAttempts, t.RunAt.Sub(now).Round(time.Second))
	case StateScheduled:
		return fmt.Sprintf("runs in %s", t.RunAt.Sub(now).Round(time.Second))
	}
	return ""
}
