package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Task is a claimed task as its handler sees it.
type Task struct {
	ID          int64
	Name        string
	Queue       string
	Payload     json.RawMessage
	Metadata    json.RawMessage
	Priority    int
	Attempt     int // 1 on the first run
	MaxAttempts int
	CreatedAt   time.Time
	RunAt       time.Time
	StartedAt   time.Time
}

// Decode unmarshals the payload into v. A payload that does not fit v is a
// permanent failure when returned from a handler as is: retrying cannot fix
// it.
func (t *Task) Decode(v any) error {
	if err := json.Unmarshal(t.Payload, v); err != nil {
		return Permanent(fmt.Errorf("decoding payload of task %d (%s): %w", t.ID, t.Name, err))
	}
	return nil
}

// Handler runs one attempt of a task. It must respect ctx: ctx is cancelled
// when the attempt times out, when the worker shuts down past its grace
// period, and when the worker loses the database session that holds the
// task's lock (another worker may then run the task). Returning nil
// completes the task; an error fails the attempt, which is retried with
// backoff until the task's max attempts; a panic is recovered and counts as
// an error, stack included.
type Handler func(ctx context.Context, t *Task) error

// Handlers maps task names to their handlers.
type Handlers map[string]Handler

type snoozeError struct{ d time.Duration }

func (e snoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.d) }

// Snooze returns an error that puts the task back to pending to run again
// after d, without spending an attempt or recording a failure: for work
// that is not ready yet.
func Snooze(d time.Duration) error { return snoozeError{max(d, 0)} }

type retryError struct {
	d   time.Duration
	err error
}

func (e retryError) Error() string { return e.err.Error() }
func (e retryError) Unwrap() error { return e.err }

// RetryAfter returns err marked to be retried after d instead of the
// backoff (see Config.Retry): the attempt fails and is spent as with err,
// and if the task has attempts left it runs again after d.
// For a server that says when to come back without it costing an attempt,
// use Snooze. A nil err records "retry requested by its handler".
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested by its handler")
	}
	return retryError{max(d, 0), err}
}

type cancelError struct{ err error }

func (e cancelError) Error() string { return e.err.Error() }
func (e cancelError) Unwrap() error { return e.err }

// Cancel returns an error that cancels the task: it becomes cancelled at
// once, with err in its history, and is not retried, whatever attempts it
// has left. A failed task failed; a cancelled one was not worth doing,
// such as work for an account that is gone. Requeue brings it back. A nil
// err records "cancelled by its handler".
func Cancel(err error) error {
	if err == nil {
		err = errors.New("cancelled by its handler")
	}
	return cancelError{err}
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying: the task fails now, whatever
// attempts it has left.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}
