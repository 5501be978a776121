package observe

import (
	"context"

	"github.com/skiplock/skiplock/worker"
)

// outcomeOf classifies an attempt as the worker records it; panicked says
// the handler panicked.
func outcomeOf(ctx context.Context, err error, panicked bool) worker.Outcome {
	if panicked {
		return worker.OutcomePanic
	}
	return worker.OutcomeOf(ctx, err)
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
