package worker

import (
	"time"

	"github.com/skiplock/skiplock/queue"
)

// How logging, metrics and tracing plug into a worker: Middleware around
// the handlers, an Observer of the worker's events. Package worker/observe
// (a module of its own) provides both, for log/slog, Prometheus and
// OpenTelemetry.

// Middleware wraps a handler: logging, metrics, tracing and the like. The
// first in Config.Middleware is the outermost.
type Middleware func(Handler) Handler

// Observer receives a worker's events, for metrics. Its methods are called
// on the worker's hot paths: they must be fast, must not block, and must be
// safe for concurrent use. Embed NopObserver to implement only some.
type Observer interface {
	// Claimed reports a claim that asked for up to asked tasks of a queue
	// and got got.
	Claimed(queueName string, asked, got int)
	// Finished reports an attempt's outcome and where the task goes next
	// (retrying, scheduled or pending for a retry, snooze or shutdown;
	// completed, failed or cancelled), after ran.
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
