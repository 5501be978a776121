package queue

import (
	"cmp"
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
	// MaxNameLength bounds task and queue names (and workflow step names),
	// in bytes: 255, as the task table's checks do. A name is read on
	// every claim and log line, and a queue name is the payload of the
	// NOTIFY that wakes workers; names longer than a line are mistakes.
	// The SQL enqueue functions refuse longer ones too; it is not
	// configurable.
	MaxNameLength = 255
	// MaxKeyLength bounds unique, exclusive, limit, sequence and replace keys, in
	// bytes: 1024, room for a few IDs and a digest. Not configurable.
	MaxKeyLength = 1024
)

// Option sets one property of an enqueued task.
type Option func(*options)

type options struct {
	queue        string
	priority     int
	runAt        time.Time
	delay        time.Duration
	maxAttempts  int
	timeout      time.Duration
	metadata     json.RawMessage
	uniqueKey    string
	uniqueDerive bool
	uniqueWindow time.Duration
	exclusiveKey string
	dependsOn    []int64
	depFailure   DependencyFailure
	limitKey     string
	sequenceKey  string
	sequenceSet  bool
	sequenceHold bool
	replaceKey   string
	replaceSet   bool
	debounce     time.Duration
	debounceSet  bool
	duplicateErr bool
	shardKey     string // WithShardKey: read by ShardedClient only
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

// WithUniqueKey makes the task unique by key: while a task with the same
// key is pending or running, enqueueing another inserts nothing and
// returns a result with Duplicate set and the existing task's ID, and a
// nil error (WithDuplicateError makes it an error). A unique
// index enforces it, so concurrent producers cannot race past it. With
// WithUniqueWindow, the key is unique within each window instead, whatever
// the first task's status.
func WithUniqueKey(key string) Option { return func(o *options) { o.uniqueKey = key } }

// WithUnique is WithUniqueKey with a key derived from the task's name and
// payload (a SHA-256 of the compacted JSON, so formatting does not matter;
// object key order does).
func WithUnique() Option { return func(o *options) { o.uniqueDerive = true } }

// WithDuplicateError makes a duplicate of the task an error as well as a
// result: when its unique key is taken, the call returns the Duplicate
// result with a *DuplicateError, which wraps ErrDuplicate (EnqueueMany
// joins one for each such task, and still inserts the others). It needs
// WithUniqueKey or WithUnique.
func WithDuplicateError() Option { return func(o *options) { o.duplicateErr = true } }

// WithUniqueWindow bounds uniqueness to fixed windows of d (aligned to the
// Unix epoch): at most one task per key per window, even if the first has
// finished. It needs WithUniqueKey or WithUnique.
func WithUniqueWindow(d time.Duration) Option { return func(o *options) { o.uniqueWindow = d } }

// WithExclusiveKey lets at most one task with key run at a time, across
// every worker: others with the key wait, pending, without holding a worker
// slot, while tasks with other keys run in parallel.
func WithExclusiveKey(key string) Option { return func(o *options) { o.exclusiveKey = key } }

// WithLimitKey sets the key that concurrency limits of kind "key" match
// (Client.SetLimit with Limit.Key, `skiplock limit set --key`): a tenant,
// say, "tenant:42", limited with the pattern "tenant:*" to at most N running
// tasks per tenant across every worker. Per-key rate limits count by it too
// (worker.RateLimit with PerKey: at most N starts a second per key, say).
// A key no limit matches costs nothing. At most 1024 bytes
// (MaxKeyLength).
func WithLimitKey(key string) Option { return func(o *options) { o.limitKey = key } }

func buildOptions(opts []Option) (options, error) {
	o := options{queue: DefaultQueue, maxAttempts: DefaultMaxAttempts}
	for _, opt := range opts {
		opt(&o)
	}
	for _, c := range []struct {
		what, s  string
		required bool
		max      int
		constant string
	}{
		{"queue name", o.queue, true, MaxNameLength, "queue.MaxNameLength"},
		{"unique key", o.uniqueKey, false, MaxKeyLength, "queue.MaxKeyLength"},
		{"exclusive key", o.exclusiveKey, false, MaxKeyLength, "queue.MaxKeyLength"},
		{"limit key", o.limitKey, false, MaxKeyLength, "queue.MaxKeyLength"},
		{"sequence key", o.sequenceKey, o.sequenceSet, MaxKeyLength, "queue.MaxKeyLength"},
		{"replace key", o.replaceKey, false, MaxKeyLength, "queue.MaxKeyLength"},
		{"shard key", o.shardKey, false, MaxKeyLength, "queue.MaxKeyLength"},
	} {
		if err := checkLength(c.what, c.s, c.required, c.max, c.constant); err != nil {
			return o, err
		}
	}
	switch {
	case o.priority < math.MinInt16 || o.priority > math.MaxInt16:
		return o, fmt.Errorf("%w: priority %d is outside %d..%d", ErrInvalidTask, o.priority, math.MinInt16, math.MaxInt16)
	case o.maxAttempts < 1 || o.maxAttempts > math.MaxInt32:
		return o, fmt.Errorf("%w: max attempts must be at least 1, got %d", ErrInvalidTask, o.maxAttempts)
	case o.delay < 0:
		return o, fmt.Errorf("%w: delay must not be negative, got %s", ErrInvalidTask, o.delay)
	case o.timeout < 0 || (o.timeout > 0 && o.timeout < time.Millisecond):
		return o, fmt.Errorf("%w: timeout must be at least 1ms, got %s", ErrInvalidTask, o.timeout)
	case o.uniqueWindow < 0 || (o.uniqueWindow > 0 && o.uniqueWindow < time.Second):
		return o, fmt.Errorf("%w: unique window must be at least 1s, got %s", ErrInvalidTask, o.uniqueWindow)
	case o.uniqueWindow > 0 && o.uniqueKey == "" && !o.uniqueDerive:
		return o, fmt.Errorf("%w: WithUniqueWindow needs WithUniqueKey or WithUnique", ErrInvalidTask)
	case o.duplicateErr && o.uniqueKey == "" && !o.uniqueDerive:
		return o, fmt.Errorf("%w: WithDuplicateError needs WithUniqueKey or WithUnique", ErrInvalidTask)
	case o.sequenceHold && !o.sequenceSet:
		return o, fmt.Errorf("%w: WithSequenceHold needs WithSequence", ErrInvalidTask)
	case o.sequenceSet && len(o.dependsOn) > 0:
		// Both keep tasks 'waiting', each with its own release.
		return o, fmt.Errorf("%w: WithSequence cannot be combined with WithDependsOn", ErrInvalidTask)
	case o.sequenceSet && (o.uniqueKey != "" || o.uniqueDerive) && o.uniqueWindow == 0:
		// As with WithDependsOn: a waiting task does not hold its unique
		// key, and its release could collide with a task that took it.
		return o, fmt.Errorf("%w: WithSequence cannot be combined with a unique key unless it has a WithUniqueWindow", ErrInvalidTask)
	case o.depFailure != "" && o.depFailure != DependencyFailureCancel && o.depFailure != DependencyFailureWait:
		return o, fmt.Errorf("%w: dependency failure policy %q is not %q or %q", ErrInvalidTask, o.depFailure, DependencyFailureCancel, DependencyFailureWait)
	}
	if len(o.dependsOn) > 0 && (o.uniqueKey != "" || o.uniqueDerive) && o.uniqueWindow == 0 {
		// The unique index covers pending and running tasks, not waiting
		// ones: a waiting task could not hold its key, and its release
		// could collide with a task that took the key meanwhile.
		return o, fmt.Errorf("%w: WithDependsOn cannot be combined with a unique key unless it has a WithUniqueWindow", ErrInvalidTask)
	}
	if err := checkReplace(&o); err != nil {
		return o, err
	}
	for _, id := range o.dependsOn {
		if id <= 0 {
			return o, fmt.Errorf("%w: WithDependsOn: %d is not a task ID", ErrInvalidTask, id)
		}
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

// refusals are the options a group of tasks (a workflow's steps, a batch's
// members) cannot take, each with why, for an error that names the option.
type refusals struct {
	scope     string // "a whole workflow"
	uniqueKey string // WithUniqueKey; unique when empty
	unique    string // WithUnique, WithUniqueWindow
	sequence  string // WithSequence, WithSequenceHold
	depends   string // WithDependsOn
	replace   string // WithReplaceKey, WithDebounce
}

// check refuses the first option of opts that r names, and validates the
// others on their own.
func (r refusals) check(opts []Option) error {
	if len(opts) == 0 {
		return nil
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	refuse := func(option, why string) error {
		return fmt.Errorf("%w: %s does not apply to %s (%s)", ErrInvalidTask, option, r.scope, why)
	}
	switch {
	case o.uniqueKey != "":
		return refuse("WithUniqueKey", cmp.Or(r.uniqueKey, r.unique))
	case o.uniqueDerive:
		return refuse("WithUnique", r.unique)
	case o.uniqueWindow != 0:
		return refuse("WithUniqueWindow", r.unique)
	case o.sequenceSet:
		return refuse("WithSequence", r.sequence)
	case o.sequenceHold:
		return refuse("WithSequenceHold", r.sequence)
	case len(o.dependsOn) > 0:
		return refuse("WithDependsOn", r.depends)
	case o.replaceSet, o.debounceSet:
		return refuse("WithReplaceKey or WithDebounce", r.replace)
	}
	_, err := buildOptions(opts)
	return err
}
