package observe

import (
	"context"
	"errors"
	"reflect"
	"strings"

	"github.com/skiplock/skiplock/worker"
)

// snoozeType is the type of worker.Snooze's errors, which the worker does
// not export.
var snoozeType = reflect.TypeOf(worker.Snooze(0))

// outcomeOf classifies an attempt as the worker records it, from what the
// handler returned and its context; panicked says the handler panicked.
// A middleware sees no outcome from the worker, so this follows the
// worker's own classification in the same order.
func outcomeOf(ctx context.Context, err error, panicked bool) worker.Outcome {
	switch {
	case panicked:
		return worker.OutcomePanic
	case err == nil:
		return worker.OutcomeSuccess
	case isSnooze(err):
		return worker.OutcomeSnoozed
	}
	cause := context.Cause(ctx)
	switch {
	case ctx.Err() == nil:
		return worker.OutcomeError
	case errors.Is(cause, worker.ErrCancelled):
		return worker.OutcomeCancelled
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return worker.OutcomeTimeout
	case cause != nil && strings.Contains(cause.Error(), "shutting down"):
		// The worker's shutdown and lost-session causes are unexported.
		return worker.OutcomeShutdown
	default:
		return worker.OutcomeLockLost
	}
}

func isSnooze(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if reflect.TypeOf(err) == snoozeType {
			return true
		}
	}
	return false
}

// outcomeLabel names an outcome in logs and metrics: "success" for the
// empty OutcomeSuccess.
func outcomeLabel(o worker.Outcome) string {
	if o == worker.OutcomeSuccess {
		return "success"
	}
	return string(o)
}

// failed reports whether an outcome counts as a failed attempt: snoozes and
// shutdowns are not the task's fault.
func failed(o worker.Outcome) bool {
	switch o {
	case worker.OutcomeSuccess, worker.OutcomeSnoozed, worker.OutcomeShutdown:
		return false
	}
	return true
}

// call runs h and reports whether it panicked; a panic is re-raised after
// report runs, so that the worker records it with its stack as usual.
func call(ctx context.Context, h worker.Handler, t *worker.Task, report func(err error, panicked bool, value any)) (err error) {
	panicked := true
	defer func() {
		if !panicked {
			return
		}
		v := recover()
		report(nil, true, v)
		panic(v)
	}()
	err = h(ctx, t)
	panicked = false
	report(err, false, nil)
	return err
}
