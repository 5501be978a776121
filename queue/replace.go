package queue

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// WithReplaceKey makes a task replace the task of key that has not started
// yet, instead of adding another: while a task with the key is pending and
// has never run, enqueueing one with the same key gives that task the new
// call's name, payload, metadata, queue, priority, run time (now, or
// WithDelay, WithRunAt), attempts, timeout, exclusive and limit keys; it
// keeps its ID, which the call returns. Once it has started (running,
// retrying, finished), the next call inserts a new task, which is then
// the pending one of the key: a key has at most one pending task, and that
// task runs with the payload of the last call before a worker claimed it.
// The result's Replaced tells whether a call replaced or inserted.
//
// A worker claiming the task as it is replaced either claimed it first
// (the call then inserts a new task) or runs it with the new contents;
// never with the old ones after the call reported a replacement. A unique
// index enforces one pending task per key, so concurrent producers never
// add a second one and get no error. The key is 1 to MaxKeyLength bytes.
// It cannot be combined with a unique key (WithUniqueKey, WithUnique),
// WithSequence or WithDependsOn, nor be a Workflow step's. Enqueue sends
// such a task in a statement of its own, not group-committed with other
// calls.
func WithReplaceKey(key string) Option {
	return func(o *options) { o.replaceKey, o.replaceSet = key, true }
}

// WithDebounce is WithReplaceKey(key) with a run time of d after each call
// (on the database's clock): a burst of calls with the key leaves one
// pending task, with the last call's payload, that runs d after the last
// call. d must not be negative; it cannot be combined with WithDelay or
// WithRunAt, which it replaces, nor with WithReplaceKey.
func WithDebounce(key string, d time.Duration) Option {
	return func(o *options) {
		o.replaceKey, o.debounce, o.debounceSet = key, d, true
	}
}

// replaceRetries bounds the rounds of TaskInsertReplacing lost to other
// producers of the key: each lost round means another producer inserted
// a task of the key since this one looked.
const replaceRetries = 100

// checkReplace validates the replace options of o.
func checkReplace(o *options) error {
	if !o.replaceSet && !o.debounceSet {
		return nil
	}
	opt := "WithReplaceKey"
	if o.debounceSet {
		opt = "WithDebounce"
	}
	var other string
	switch {
	case o.uniqueKey != "":
		other = "WithUniqueKey"
	case o.uniqueDerive:
		other = "WithUnique"
	case o.uniqueWindow != 0:
		other = "WithUniqueWindow"
	case o.sequenceSet:
		other = "WithSequence"
	case len(o.dependsOn) > 0:
		other = "WithDependsOn"
	}
	switch {
	case o.replaceSet && o.debounceSet:
		return fmt.Errorf("%w: WithReplaceKey and WithDebounce cannot be combined (WithDebounce replaces too)", ErrInvalidTask)
	case o.replaceKey == "":
		return fmt.Errorf("%w: %s: the key is empty", ErrInvalidTask, opt)
	case o.debounce < 0:
		return fmt.Errorf("%w: WithDebounce: the delay must not be negative, got %s", ErrInvalidTask, o.debounce)
	case o.debounceSet && (o.delay != 0 || !o.runAt.IsZero()):
		return fmt.Errorf("%w: WithDebounce sets the run time; it cannot be combined with WithDelay or WithRunAt", ErrInvalidTask)
	case other == "WithDependsOn" || other == "WithSequence":
		return fmt.Errorf("%w: %s cannot be combined with %s (a task that waits is not pending, so it cannot be replaced)", ErrInvalidTask, opt, other)
	case other != "":
		return fmt.Errorf("%w: %s cannot be combined with %s (a pending task of a replace key is replaced, not kept as a unique one is)", ErrInvalidTask, opt, other)
	}
	if o.debounceSet {
		o.delay = o.debounce
	}
	return nil
}

func withReplaceKeys(rows []row) bool {
	for i := range rows {
		if rows[i].replaceKey != "" {
			return true
		}
	}
	return false
}

// insertWithReplaceKeys inserts a batch in which some tasks have replace
// keys: the others together, as usual, then those one by one, ordered by
// key so that batches lock the keys' tasks in one order (the tasks of one
// key stay in batch order, the last one winning). Each row's replaced is
// set as it succeeds.
func (c *Client) insertWithReplaceKeys(ctx context.Context, tx Executor, rows []row) ([]int64, []*DuplicateError, error) {
	ids := make([]int64, len(rows))
	var plain, keyed []int
	for i := range rows {
		if rows[i].replaceKey == "" {
			plain = append(plain, i)
		} else {
			keyed = append(keyed, i)
		}
	}
	var dups []*DuplicateError
	if len(plain) > 0 {
		sub := make([]row, len(plain))
		for j, i := range plain {
			sub[j] = rows[i]
		}
		var subIDs []int64
		var err error
		if withDependencies(sub) {
			subIDs, dups, err = c.insertEach(ctx, tx, sub)
		} else {
			subIDs, dups, err = c.insertChunks(ctx, tx, sub)
		}
		if err != nil {
			return nil, nil, err
		}
		for j, i := range plain {
			ids[i] = subIDs[j]
		}
		for _, d := range dups {
			d.Index = plain[d.Index]
		}
	}
	slices.SortStableFunc(keyed, func(a, b int) int { return strings.Compare(rows[a].replaceKey, rows[b].replaceKey) })
	for _, i := range keyed {
		id, err := c.insertReplacing(ctx, tx, rows[i])
		if err != nil {
			return nil, nil, err
		}
		ids[i] = id
	}
	return ids, dups, nil
}

// insertReplacing enqueues one task with a replace key, replacing the
// unstarted task of its key if there is one, and sets *r.replaced.
func (c *Client) insertReplacing(ctx context.Context, tx Executor, r row) (int64, error) {
	p := db.TaskInsertReplacingParams{
		Queue: r.queue, Name: r.name, Payload: r.payload, Metadata: r.metadata,
		Priority: r.priority, RunAt: r.runAt, DelayMs: r.delayMs,
		MaxAttempts: r.maxAttempts, TimeoutMs: r.timeoutMs,
		ExclusiveKey: r.exclusiveKey, LimitKey: r.limitKey, ReplaceKey: r.replaceKey,
	}
	x := pgerr.Interpreting(tx)
	for range replaceRetries {
		got, err := c.queries.TaskInsertReplacing(ctx, x, p)
		if err != nil {
			return 0, fmt.Errorf("enqueueing: %w", err)
		}
		if len(got) == 1 {
			*r.replaced = got[0].Replaced
			return got[0].ID, nil
		}
		// Another producer inserted a task of the key after the UPDATE
		// looked: the next round replaces it (a new statement, a new
		// snapshot, under READ COMMITTED).
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("enqueueing: replace key %q kept changing hands in %d tries (a transaction other than READ COMMITTED cannot see the task that took it); try again",
		r.replaceKey, replaceRetries)
}
