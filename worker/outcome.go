package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/queue"
)

// What an attempt came to (classify) and, from that and the task's
// attempts and retry policy, where the task goes next (finishFor).

// Outcome is how an attempt ended, as recorded in the task's error history
// ("" for success).
type Outcome string

// Outcomes of an attempt.
const (
	OutcomeSuccess   Outcome = ""
	OutcomeError     Outcome = "error"
	OutcomePanic     Outcome = "panic"
	OutcomeTimeout   Outcome = "timeout"
	OutcomeAbandoned Outcome = "abandoned"
	OutcomeNoHandler Outcome = "no_handler"
	OutcomeShutdown  Outcome = "shutdown"
	OutcomeLockLost  Outcome = "lock_lost"
	OutcomeCancelled Outcome = "cancelled"
	OutcomeSnoozed   Outcome = "snoozed"
)

// OutcomeOf classifies an attempt that returned err with the handler's
// context ctx, as the worker records it; for middleware, which sees no
// outcome from the worker. A panic is the worker's to see: OutcomeOf never
// returns OutcomePanic.
func OutcomeOf(ctx context.Context, err error) Outcome {
	if err == nil {
		return OutcomeSuccess
	}
	var snooze snoozeError
	if errors.As(err, &snooze) {
		return OutcomeSnoozed
	}
	var cancel cancelError
	if errors.As(err, &cancel) {
		return OutcomeCancelled
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errShutdown):
		return OutcomeShutdown
	case errors.Is(cause, ErrCancelled):
		return OutcomeCancelled
	case errors.Is(cause, errLockLost):
		return OutcomeLockLost
	case errors.Is(cause, errTimeout):
		return OutcomeTimeout
	}
	return OutcomeError
}

// Outcomes recorded in a task's error history.
const (
	outcomeError     = string(OutcomeError)
	outcomePanic     = string(OutcomePanic)
	outcomeTimeout   = string(OutcomeTimeout)
	outcomeAbandoned = string(OutcomeAbandoned)
	outcomeNoHandler = string(OutcomeNoHandler)
	outcomeShutdown  = string(OutcomeShutdown)
	outcomeLockLost  = string(OutcomeLockLost)
	outcomeCancelled = string(OutcomeCancelled)
	outcomeSnoozed   = string(OutcomeSnoozed)
)

// result is what an attempt came to.
type result struct {
	outcome   string // "" for success
	err       string
	permanent bool            // fail now, whatever attempts are left
	snooze    time.Duration   // with outcomeSnoozed: run again after this
	retryIn   *time.Duration  // a retry's delay from RetryAfter, over the backoff
	output    json.RawMessage // a completed attempt's output (SetOutput); nil for none
}

// classify turns what the handler (or a hook) returned into a result.
func (w *Worker) classify(e *execution, err error) result {
	if err == nil {
		// Before the targets of errors.As below, which escape: three
		// allocations a task otherwise.
		return result{}
	}
	var snooze snoozeError
	var cancel cancelError
	var p *PanicError
	switch {
	case errors.As(err, &snooze):
		return result{outcome: outcomeSnoozed, snooze: snooze.d}
	case errors.As(err, &cancel):
		return result{outcome: outcomeCancelled, err: err.Error()}
	}
	var res result
	if errors.As(err, &p) {
		res = result{outcome: outcomePanic, err: err.Error(), permanent: IsPermanent(err)}
	} else {
		switch out := OutcomeOf(e.ctx, err); out {
		case OutcomeTimeout:
			res = result{outcome: outcomeTimeout, err: fmt.Sprintf("timed out after %s: %v", e.timeout, err), permanent: IsPermanent(err)}
		case OutcomeError:
			res = result{outcome: outcomeError, err: err.Error(), permanent: IsPermanent(err)}
		default:
			return result{outcome: string(out), err: err.Error()}
		}
	}
	var retry retryError
	if errors.As(err, &retry) {
		res.retryIn = &retry.d
	}
	return res
}

// next is the status the task goes to, as queue.Status tells it: one
// written back pending is retrying or scheduled while its new run time is
// ahead (after a retry's backoff or a snooze).
func (f finish) next() queue.Status {
	if f.status != queue.StatusPending || f.delayMs <= 0 {
		return f.status
	}
	if f.attempt-f.refund > 0 {
		return queue.StatusRetrying
	}
	return queue.StatusScheduled
}

// finishFor decides where the task goes next.
func (w *Worker) finishFor(e *execution, res result) finish {
	t := e.task
	f := finish{id: t.ID, attempt: t.Attempt, claimed: e.claimed, gen: e.gen, limits: e.limits, gated: e.gated, exclusiveKey: e.exclusiveKey, queue: t.Queue, delayMs: -1}
	policy := w.cfg.Retry[t.Name]
	switch {
	case res.outcome == "":
		f.status, f.output = queue.StatusCompleted, res.output
		return f
	case res.outcome == outcomeSnoozed:
		f.status, f.refund, f.delayMs = queue.StatusPending, 1, res.snooze.Milliseconds()
		return f
	case res.outcome == outcomeShutdown || res.outcome == outcomeNoHandler:
		// Not the task's fault: back to the front of the line, attempt
		// given back (without a handler here, for a worker that has one).
		f.status, f.refund = queue.StatusPending, 1
	case res.outcome == outcomeCancelled:
		f.status = queue.StatusCancelled
	case res.outcome == outcomeLockLost:
		// As the rescuer would have it (TaskRescueOrphans), whichever of
		// the two writes first: the attempt never reached an outcome and
		// is given back, on the last attempt too, and the task keeps its
		// place in line (its run_at) rather than going behind the backlog.
		// It may already run elsewhere; then this write is fenced off.
		f.status, f.refund = queue.StatusPending, 1
	case res.permanent || t.Attempt >= t.MaxAttempts:
		f.status = queue.StatusFailed
	case policy.MaxAttempts > 0 && t.Attempt >= policy.MaxAttempts:
		// Failed for good before the task's own attempts ran out: recorded
		// as permanent, saying why.
		f.status, res.permanent = queue.StatusFailed, true
		res.err += fmt.Sprintf(" (not retried: the worker's retry policy for %s allows %d attempts)", t.Name, policy.MaxAttempts)
	default:
		f.status = queue.StatusPending
		backoff := w.cfg.RetryBackoff
		if policy.Backoff != nil {
			backoff = policy.Backoff
		}
		delay := res.retryIn
		if delay == nil {
			d := backoff(t.Attempt)
			delay = &d
		}
		f.delayMs = max(delay.Milliseconds(), 0)
	}
	f.entry = queue.AttemptError{
		Attempt:    t.Attempt,
		Outcome:    res.outcome,
		Error:      res.err,
		Permanent:  res.permanent && f.status == queue.StatusFailed,
		WorkerID:   w.cfg.WorkerID,
		Host:       w.host,
		PID:        w.pid,
		StartedAt:  t.StartedAt,
		FinishedAt: time.Now(),
	}
	return f
}
