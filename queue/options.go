package queue

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Defaults and limits of a task's options.
const (
	// DefaultQueue is the queue of a task enqueued without WithQueue.
	DefaultQueue = "default"
	// DefaultMaxAttempts is how many times a task runs before it stays failed.
	DefaultMaxAttempts = 25
	// MaxNameLength bounds task and queue names.
	MaxNameLength = 255
)

// Option sets one property of an enqueued task.
type Option func(*options)

type options struct {
	queue       string
	priority    int
	runAt       time.Time
	delay       time.Duration
	maxAttempts int
	timeout     time.Duration
	metadata    json.RawMessage
}

// WithQueue puts the task in the named queue. Defaults to "default".
func WithQueue(name string) Option { return func(o *options) { o.queue = name } }

// WithPriority orders the task within its queue: lower values run first.
// Defaults to 0; any int16 value is allowed, so urgent work can go negative.
func WithPriority(p int) Option { return func(o *options) { o.priority = p } }

// WithDelay makes the task claimable d after it is enqueued, measured on the
// database's clock.
func WithDelay(d time.Duration) Option { return func(o *options) { o.delay = d } }

// WithRunAt makes the task claimable at t. It overrides WithDelay.
func WithRunAt(t time.Time) Option { return func(o *options) { o.runAt = t } }

// WithMaxAttempts sets how many times the task may run before it stays
// failed. Defaults to DefaultMaxAttempts; 1 means no retries.
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// WithTimeout bounds each attempt: the handler's context is cancelled after
// d. Defaults to the worker's Config.TaskTimeout.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithMetadata attaches a JSON object that handlers can read but that is not
// the payload, such as trace context. It must be a JSON object.
func WithMetadata(m json.RawMessage) Option { return func(o *options) { o.metadata = m } }

func buildOptions(opts []Option) (options, error) {
	o := options{queue: DefaultQueue, maxAttempts: DefaultMaxAttempts}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.queue == "" || len(o.queue) > MaxNameLength:
		return o, fmt.Errorf("%w: queue name must be 1 to %d bytes, got %q", ErrInvalidTask, MaxNameLength, o.queue)
	case o.priority < math.MinInt16 || o.priority > math.MaxInt16:
		return o, fmt.Errorf("%w: priority %d is outside %d..%d", ErrInvalidTask, o.priority, math.MinInt16, math.MaxInt16)
	case o.maxAttempts < 1 || o.maxAttempts > math.MaxInt32:
		return o, fmt.Errorf("%w: max attempts must be at least 1, got %d", ErrInvalidTask, o.maxAttempts)
	case o.delay < 0:
		return o, fmt.Errorf("%w: delay must not be negative, got %s", ErrInvalidTask, o.delay)
	case o.timeout < 0 || (o.timeout > 0 && o.timeout < time.Millisecond):
		return o, fmt.Errorf("%w: timeout must be at least 1ms, got %s", ErrInvalidTask, o.timeout)
	}
	if o.metadata == nil {
		o.metadata = json.RawMessage(`{}`)
	} else {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(o.metadata, &m); err != nil || m == nil {
			return o, fmt.Errorf("%w: metadata must be a JSON object", ErrInvalidTask)
		}
	}
	return o, nil
}
