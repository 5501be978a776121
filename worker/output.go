package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/schema"
)

// defaultMaxOutputSize is Config.MaxOutputSize's default.
const defaultMaxOutputSize = 32 << 10

// ErrOutputTooLarge is wrapped by the error SetOutput returns, and fails the
// task for good, when an output is larger than Config.MaxOutputSize.
var ErrOutputTooLarge = errors.New("skiplock: task output too large")

// scope is what a handler's context carries about its attempt: the output
// it recorded. Each attempt has its own.
type scope struct {
	taskID int64
	// attempt and claimed (execution.claimed) fence SetProgress and the
	// checkpoint's writes.
	attempt int32
	claimed time.Time
	limit   int // bytes; < 0 for none
	worker  *Worker
	alone   bool // RunTask's: a batch handler runs the task in a batch of one
	// ctx is the handler's context, to cancel: a batch whose context
	// ended for another task's timeout, lost lock or shutdown records the
	// same for this one (bulk.go).
	ctx *taskCtx
	// committed is closed once the claim that took the task has
	// committed; nil when it had before the handler began (earlyclaim.go).
	committed <-chan struct{}

	mu     sync.Mutex
	output json.RawMessage // nil: none
	err    error           // the last SetOutput failed; fails the attempt
}

type scopeKey struct{}

// claimCommitted waits until the task's claim has committed, so that a
// statement on another connection sees the task as its handler does:
// running, and the outcomes that the claim carried written.
func (s *scope) claimCommitted(ctx context.Context) error {
	if s.committed == nil {
		return nil
	}
	select {
	case <-s.committed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func scopeOf(ctx context.Context) *scope {
	s, _ := ctx.Value(scopeKey{}).(*scope)
	return s
}

// SetOutput records v, encoded as JSON, as the output of the task whose
// handler's context is ctx. It is written with the task's completion, in
// the same statement, and read with queue.Client.Get, `skiplock show`, the
// dashboard, and by the tasks of a workflow that depend on this one
// (DependencyOutputs). The last call wins; the output of an attempt that
// does not complete is dropped. v may be a json.RawMessage or []byte
// holding JSON; JSON null records nothing.
//
// An output that cannot be encoded, or is larger than Config.MaxOutputSize
// (32 KiB by default), is an error, returned here and sticky: unless a
// later call records an output that fits, the attempt fails for good with
// that error (requeue the task after raising the limit). SetOutput returns
// an error, and records nothing, outside a handler's context.
func SetOutput(ctx context.Context, v any) error {
	s := scopeOf(ctx)
	if s == nil {
		return errors.New("skiplock: SetOutput called outside a task handler's context")
	}
	raw, err := encodeOutput(v)
	if err == nil && s.limit >= 0 && len(raw) > s.limit {
		err = fmt.Errorf("%w: task %d's output is %d bytes, over the limit of %d (worker.Config.MaxOutputSize); "+
			"record less, or raise the limit and requeue the task", ErrOutputTooLarge, s.taskID, len(raw), s.limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.output, s.err = nil, err
		return err
	}
	s.output, s.err = raw, nil
	return nil
}

// encodeOutput encodes v as schema.EncodePayload encodes a payload, with
// errors that name the output.
func encodeOutput(v any) (json.RawMessage, error) {
	raw, err := schema.EncodePayload(v)
	if err != nil {
		return nil, fmt.Errorf("skiplock: task output: %w", err)
	}
	return raw, nil
}

// Returning adapts a handler that returns its output: when fn returns a
// nil error, its value is recorded as with SetOutput (and an output that
// does not fit fails the task, as there).
//
//	handlers["resize"] = worker.Returning(func(ctx context.Context, t *worker.Task) (Thumb, error) { ... })
func Returning[T any](fn func(ctx context.Context, t *Task) (T, error)) Handler {
	return func(ctx context.Context, t *Task) error {
		v, err := fn(ctx, t)
		if err != nil {
			return err
		}
		if err := SetOutput(ctx, v); err != nil {
			return Permanent(err)
		}
		return nil
	}
}

// completed checks a successful attempt's output: an output error fails
// the task for good. It returns the output to write (nil for none).
func (s *scope) completed(res *result) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		*res = result{outcome: outcomeError, err: s.err.Error(), permanent: true}
		return nil
	}
	return s.output
}
