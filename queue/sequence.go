package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// ErrSequenceNotFound is returned by GetSequence for a key that no stored
// task has.
var ErrSequenceNotFound = errors.New("skiplock: sequence not found")

// WithSequence puts the task in the sequence named key: the tasks of one
// key run one at a time, in the order they were enqueued (task ID order),
// across every worker on every machine, while tasks of other keys run in
// parallel. A task that is not its key's head is enqueued with
// StatusWaiting, outside the claim's reach; when the head completes, is
// cancelled or deleted, or fails for good (see WithSequenceHold), the next
// one becomes pending in the same transaction. A head that fails and will
// be retried stays the head: the rest wait for its retries.
//
// Unlike WithExclusiveKey, which only keeps two tasks of a key from
// running at once and lets them run in any order, a sequence also keeps
// their order, and the tasks behind the head are not pending at all.
//
// The key is 1 to MaxKeyLength bytes; a tenant or an entity ID makes a good
// one ("account:42"). Enqueueing takes a transaction-level lock on the key,
// so producers of one key wait for each other's transactions to end: keep
// transactions that enqueue sequenced tasks short, and enqueue the keys of
// one transaction in a consistent order (EnqueueMany sorts them). The
// transaction must be READ COMMITTED, PostgreSQL's default (others are
// refused). Enqueue sends a sequenced task in a statement of its own, not
// group-committed with other calls. A task with a sequence cannot have
// dependencies (WithDependsOn), nor a unique key without a
// WithUniqueWindow; it cannot be a Workflow step. A typed task
// (TaskDefaults) can put every value in its own sequence by returning
// WithSequence from TaskOptions, a method of the value.
func WithSequence(key string) Option {
	return func(o *options) { o.sequenceKey, o.sequenceSet = key, true }
}

// WithSequenceHold makes a task of a sequence that fails for good (out of
// attempts, or a permanent error) hold the rest of its sequence: they keep
// waiting until it is requeued (it runs again, first) or cancelled (the
// next one runs). Without it, the default, the next task runs after a
// failure as after a completion. It needs WithSequence. Deleting the
// failed task lets the rest go too, and so does the worker's retention
// (worker.Config.RetainFailed, 7 days by default), which deletes it.
func WithSequenceHold() Option { return func(o *options) { o.sequenceHold = true } }

// SequenceInfo is a sequence as stored: the tasks of one key, in order.
type SequenceInfo struct {
	Key string
	// Tasks in sequence order: the unfinished ones (waiting, scheduled,
	// pending, retrying, running, failed) from the first, at most 1,000 of them, and
	// the latest finished ones (completed, cancelled), at most
	// 100. Counts has the whole sequence.
	Tasks []*Task
	// Head is the ID of the task that runs now or next: the one pending
	// (or scheduled, or retrying), running, or failed and holding the rest, else the first waiting (a
	// release the rescuer's pass makes within a RescueInterval). 0 when no
	// task is left to run.
	Head int64
	// Counts has how many of the sequence's tasks are in each status.
	Counts map[Status]int64
}

// Summary returns how many tasks the sequence has and Counts in words, in
// status order: "2 waiting, 1 running, 3 completed".
func (s *SequenceInfo) Summary() (total int64, words string) {
	var parts []string
	for _, st := range Statuses {
		if n := s.Counts[st]; n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return total, strings.Join(parts, ", ")
}

// Bounds of the tasks GetSequence returns.
const (
	maxSequenceLive = 1000
	maxSequenceDone = 100
)

// GetSequence returns the tasks of the sequence key (WithSequence), or an
// error wrapping ErrSequenceNotFound when no stored task has it, or
// ErrInvalidRequest for a key that could not be one (empty, longer than
// MaxKeyLength).
func (c *Client) GetSequence(ctx context.Context, key string) (*SequenceInfo, error) {
	if key == "" || len(key) > MaxKeyLength {
		return nil, fmt.Errorf("%w: sequence key must be 1 to %d bytes, got %d", ErrInvalidRequest, MaxKeyLength, len(key))
	}
	counts, err := c.queries.SequenceCounts(ctx, c.exec, key)
	if err != nil {
		return nil, fmt.Errorf("getting sequence %q: %w", key, err)
	}
	if len(counts) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrSequenceNotFound, key)
	}
	rows, err := c.queries.SequenceTasks(ctx, c.exec, db.SequenceTasksParams{
		SequenceKey: key, MaxLive: maxSequenceLive, MaxDone: maxSequenceDone,
	})
	if err != nil {
		return nil, fmt.Errorf("getting sequence %q: %w", key, err)
	}
	out := &SequenceInfo{Key: key, Counts: make(map[Status]int64, len(counts))}
	for _, n := range counts {
		out.Counts[Status(n.Status)] = n.Count
	}
	var firstWaiting int64
	for _, r := range rows {
		t, err := taskFromRow(r)
		if err != nil {
			return nil, err
		}
		out.Tasks = append(out.Tasks, t)
		switch {
		case t.Status.stored() == StatusPending || t.Status == StatusRunning || (t.Status == StatusFailed && t.SequenceHold):
			if out.Head == 0 {
				out.Head = t.ID
			}
		case t.Status == StatusWaiting && firstWaiting == 0:
			firstWaiting = t.ID
		}
	}
	if out.Head == 0 {
		out.Head = firstWaiting
	}
	return out, nil
}

func withSequences(rows []row) bool {
	for i := range rows {
		if rows[i].sequenceKey != "" {
			return true
		}
	}
	return false
}

// sequenceKeys is the distinct sequence keys of rows.
func sequenceKeys(rows []row) []string {
	seen := map[string]bool{}
	var keys []string
	for i := range rows {
		if k := rows[i].sequenceKey; k != "" && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// insertSequenced is TaskInsertMany for a batch with sequence keys: the
// same rows, with their keys and holds, through TaskInsertSequenced, which
// locks lockKeys (rows' own keys when nil) first.
func (c *Client) insertSequenced(ctx context.Context, tx Executor, p db.TaskInsertManyParams, rows []row, lockKeys []string) ([]db.TaskInsertManyRow, error) {
	if lockKeys == nil {
		lockKeys = sequenceKeys(rows)
	}
	sp := db.TaskInsertSequencedParams{
		Queues: p.Queues, Names: p.Names, Payloads: p.Payloads, Metadatas: p.Metadatas, Priorities: p.Priorities,
		RunAts: p.RunAts, DelayMs: p.DelayMs, MaxAttempts: p.MaxAttempts, TimeoutMs: p.TimeoutMs,
		UniqueKeys: p.UniqueKeys, UniqueWindowKeys: p.UniqueWindowKeys, ExclusiveKeys: p.ExclusiveKeys,
		LimitKeys: p.LimitKeys, SequenceKeys: make([]string, len(rows)), SequenceHolds: make([]bool, len(rows)),
		LockKeys: lockKeys,
	}
	for i := range rows {
		sp.SequenceKeys[i], sp.SequenceHolds[i] = rows[i].sequenceKey, rows[i].sequenceHold
	}
	inserted, err := c.queries.TaskInsertSequenced(ctx, pgerr.Interpreting(tx), sp)
	if err != nil {
		return nil, err
	}
	return insertedRows(inserted), nil
}
