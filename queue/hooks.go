package queue

import (
	"context"
	"encoding/json"
	"fmt"
)

// EnqueueHook sees the tasks a Client enqueues: to carry trace context in
// their metadata, to count them. Both methods run on the enqueuing
// goroutine, so they must be fast, and safe for concurrent use.
type EnqueueHook interface {
	// BeforeEnqueue runs for each batch before it is inserted, with the
	// context of the enqueue call. It may set entries of each task's
	// Metadata; entries the producer set with WithMetadata are kept unless
	// the hook overwrites them.
	BeforeEnqueue(ctx context.Context, tasks []*EnqueuedTask)
	// AfterEnqueue runs after the insert statement, with the tasks it
	// inserted (duplicates left out). With EnqueueTx this is before the
	// caller's transaction commits: a rollback still undoes them.
	AfterEnqueue(ctx context.Context, tasks []*EnqueuedTask)
}

// EnqueuedTask is a task as an EnqueueHook sees it.
type EnqueuedTask struct {
	Name  string
	Queue string
	// Metadata is the task's metadata object, which BeforeEnqueue may add
	// to.
	Metadata map[string]json.RawMessage
	// ID is set for AfterEnqueue.
	ID int64
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithEnqueueHooks adds hooks that see every task the Client enqueues, in
// order.
func WithEnqueueHooks(hooks ...EnqueueHook) ClientOption {
	return func(c *Client) { c.hooks = append(c.hooks, hooks...) }
}

// beforeEnqueue lets the hooks amend the tasks' metadata, with the context
// of the call that enqueues them, and returns the tasks as they saw them
// for afterEnqueue.
// It then checks the size of each task's metadata, as it will be stored.
func (c *Client) beforeEnqueue(ctx context.Context, rows []row) ([]*EnqueuedTask, error) {
	if len(c.hooks) == 0 {
		return nil, c.checkMetadata(rows)
	}
	tasks := make([]*EnqueuedTask, len(rows))
	for i, r := range rows {
		t := &EnqueuedTask{Name: r.name, Queue: r.queue}
		// buildOptions checked that metadata is an object.
		if err := json.Unmarshal(r.metadata, &t.Metadata); err != nil || t.Metadata == nil {
			t.Metadata = map[string]json.RawMessage{}
		}
		tasks[i] = t
	}
	for _, h := range c.hooks {
		h.BeforeEnqueue(ctx, tasks)
	}
	for i, t := range tasks {
		m, err := json.Marshal(t.Metadata)
		if err != nil {
			return nil, fmt.Errorf("%w: metadata from an enqueue hook: %v", ErrInvalidTask, err)
		}
		rows[i].metadata = m
	}
	return tasks, c.checkMetadata(rows)
}

func (c *Client) checkMetadata(rows []row) error {
	for _, r := range rows {
		if err := checkSize(r.name, "metadata", len(r.metadata), c.limits.metadata, "queue.WithMaxMetadataSize"); err != nil {
			return err
		}
	}
	return nil
}

// afterEnqueue tells the hooks which tasks were inserted: ids holds 0 in
// the place of each duplicate.
func (c *Client) afterEnqueue(ctx context.Context, tasks []*EnqueuedTask, ids []int64) {
	if len(c.hooks) == 0 {
		return
	}
	inserted := make([]*EnqueuedTask, 0, len(tasks))
	for i, t := range tasks {
		if ids[i] != 0 {
			t.ID = ids[i]
			inserted = append(inserted, t)
		}
	}
	if len(inserted) == 0 {
		return
	}
	for _, h := range c.hooks {
		h.AfterEnqueue(ctx, inserted)
	}
}
