package worker

import (
	"context"
	"errors"

	"github.com/skiplock/skiplock/queue"
)

// BatchInfo returns the batch of the task whose handler's context is ctx,
// member or callback (queue.Client.EnqueueBatch), with the counts of its
// members by outcome as they stand when called: in an OnFinish or
// OnSuccess callback, the counts at the batch's finish, unless a member
// was requeued since. It reads them from the database when called, so a
// task that does not call it pays nothing. It returns queue.ErrNotInBatch
// for a task outside batches, and an error outside a handler's context.
func BatchInfo(ctx context.Context) (*queue.BatchInfo, error) {
	s := scopeOf(ctx)
	if s == nil {
		return nil, errors.New("skiplock: BatchInfo called outside a task handler's context")
	}
	if err := s.claimCommitted(ctx); err != nil {
		return nil, err
	}
	return s.worker.producer.BatchOfTask(ctx, s.taskID)
}
