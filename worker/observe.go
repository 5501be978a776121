package worker

import (
	"context"
	"errors"
	"time"

	"github.com/skiplock/skiplock/queue"
)

// Middleware wraps a handler: logging, metrics, tracing and the like. The
// first in Config.Middleware is the outermost.
type Middleware func(Handler) Handler

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

// Observer receives a worker's events, for metrics. Its methods are called
// on the worker's hot paths: they must be fast, must not block, and must be
// safe for concurrent use. Embed NopObserver to implement only some.
type Observer interface {
	// Claimed reports a claim that asked for up to asked tasks of a queue
	// and got got.
	Claimed(queueName string, asked, got int)
	// Finished reports an attempt's outcome and where the task goes next
	// (pending for a retry, snooze or shutdown; completed, failed or
	// cancelled), after ran.
	Finished(t *Task, outcome Outcome, next queue.Status, ran time.Duration)
	// Rescued reports a task that this worker, as the elected rescuer,
	// returned to the queue (or failed) because its worker was gone.
	Rescued(queueName, name string)
	// LockSessionLost reports the loss of the session holding this worker's
	// task locks; running reports how many handlers it cancels.
	LockSessionLost(running int)
	// LockSessionReconnected reports a new lock session.
	LockSessionReconnected()
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Claimed(string, int, int)                             {}
func (NopObserver) Finished(*Task, Outcome, queue.Status, time.Duration) {}
func (NopObserver) Rescued(string, string)                               {}
func (NopObserver) LockSessionLost(int)                                  {}
func (NopObserver) LockSessionReconnected()                              {}

// wrap applies the configured middleware to every handler.
func wrap(handlers Handlers, mw []Middleware) Handlers {
	if len(mw) == 0 {
		return handlers
	}
	out := make(Handlers, len(handlers))
	for name, h := range handlers {
		for i := len(mw) - 1; i >= 0; i-- {
			h = mw[i](h)
		}
		out[name] = h
	}
	return out
}

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
