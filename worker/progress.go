package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/schema"
)

// ErrNotHeld is wrapped by the error SetProgress, SaveCheckpoint and
// LoadCheckpoint return when the task is no longer running in this attempt
// on this worker: it was rescued (and may run elsewhere), cancelled,
// requeued or deleted. The handler should stop; its outcome will not be
// recorded either.
var ErrNotHeld = errors.New("skiplock: task is no longer held by this attempt")

// ErrProgressTooLarge is wrapped by the error SetProgress and
// SaveCheckpoint return, having written nothing, when the value is larger
// than Config.MaxOutputSize (32 KiB by default). Unlike an output too
// large, it does not fail the task.
var ErrProgressTooLarge = errors.New("skiplock: task progress or checkpoint too large")

// progressWriteTimeout bounds each progress or checkpoint statement. The
// statements do not stop when the handler's context is cancelled, so that a
// handler can save a checkpoint as it shuts down.
const progressWriteTimeout = 10 * time.Second

// SetProgress records v, encoded as JSON (a number, or a small value such
// as {"done": 40, "total": 100}), as the progress of the task whose
// handler's context is ctx. It is written at once, in its own statement,
// and read with queue.Client.Get and List, `skiplock show` and the
// dashboard's task page. The last call wins; progress stays as the last
// attempt left it (through retries and completion) until a handler sets it
// again. nil (JSON null) clears it.
//
// It returns an error wrapping ErrNotHeld when the task is no longer this
// attempt's, ErrProgressTooLarge when v is larger than
// Config.MaxOutputSize, and an error outside a handler's context. A
// failed call changes nothing and does not fail the task.
func SetProgress(ctx context.Context, v any) error {
	return writeProgress(ctx, "SetProgress", "progress", v, func(q *db.Queries, ctx context.Context, s *scope, raw json.RawMessage) (int64, error) {
		return q.TaskProgressSet(ctx, s.worker.pool, db.TaskProgressSetParams{Progress: raw, ID: s.taskID, Attempt: s.attempt, WorkerID: s.worker.cfg.WorkerID, StartedAt: s.claimed})
	})
}

// SaveCheckpoint records v, encoded as JSON, as the checkpoint of the task
// whose handler's context is ctx: the state a later attempt resumes from
// (LoadCheckpoint) after this one fails, times out, or its worker crashes
// and the task is rescued. It is written at once, in its own statement,
// and the last call wins. A checkpoint survives retries, rescues and
// requeues, and is kept when the task completes, for inspection
// (queue.Task.Checkpoint, `skiplock show`, the dashboard); nil (JSON null)
// clears it.
//
// Its errors are SetProgress's: ErrNotHeld, ErrProgressTooLarge, and an
// error outside a handler's context. A failed call changes nothing.
func SaveCheckpoint(ctx context.Context, v any) error {
	return writeProgress(ctx, "SaveCheckpoint", "checkpoint", v, func(q *db.Queries, ctx context.Context, s *scope, raw json.RawMessage) (int64, error) {
		return q.TaskCheckpointSave(ctx, s.worker.pool, db.TaskCheckpointSaveParams{Checkpoint: raw, ID: s.taskID, Attempt: s.attempt, WorkerID: s.worker.cfg.WorkerID, StartedAt: s.claimed})
	})
}

func writeProgress(ctx context.Context, fn, what string, v any,
	write func(q *db.Queries, ctx context.Context, s *scope, raw json.RawMessage) (int64, error)) error {
	s := scopeOf(ctx)
	if s == nil {
		return fmt.Errorf("skiplock: %s called outside a task handler's context", fn)
	}
	raw, err := schema.EncodePayload(v)
	if err != nil {
		return fmt.Errorf("skiplock: task %s: %w", what, err)
	}
	if s.limit >= 0 && len(raw) > s.limit {
		return fmt.Errorf("%w: task %d's %s is %d bytes, over the limit of %d (worker.Config.MaxOutputSize)",
			ErrProgressTooLarge, s.taskID, what, len(raw), s.limit)
	}
	if string(raw) == "null" {
		raw = nil // SQL NULL: none
	}
	if err := s.claimCommitted(ctx); err != nil {
		return fmt.Errorf("recording the %s of task %d: %w", what, s.taskID, err)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), progressWriteTimeout)
	defer cancel()
	n, err := write(s.worker.queries, wctx, s, raw)
	if err != nil {
		return fmt.Errorf("recording the %s of task %d: %w", what, s.taskID, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: recording the %s of task %d (attempt %d)", ErrNotHeld, what, s.taskID, s.attempt)
	}
	return nil
}

// LoadCheckpoint decodes into v the last checkpoint saved for the task
// whose handler's context is ctx (SaveCheckpoint, by this attempt or an
// earlier one) and reports whether there was one; with none, v is left
// alone. It reads the task's row when called, at any attempt, so a handler
// that does not call it pays nothing.
//
// It returns an error wrapping ErrNotHeld when the task is no longer this
// attempt's, an error when the checkpoint does not decode into v, and an
// error outside a handler's context.
func LoadCheckpoint(ctx context.Context, v any) (bool, error) {
	s := scopeOf(ctx)
	if s == nil {
		return false, errors.New("skiplock: LoadCheckpoint called outside a task handler's context")
	}
	if err := s.claimCommitted(ctx); err != nil {
		return false, fmt.Errorf("reading the checkpoint of task %d: %w", s.taskID, err)
	}
	rows, err := s.worker.queries.TaskCheckpointLoad(ctx, s.worker.pool,
		db.TaskCheckpointLoadParams{ID: s.taskID, Attempt: s.attempt, WorkerID: s.worker.cfg.WorkerID, StartedAt: s.claimed})
	if err != nil {
		return false, fmt.Errorf("reading the checkpoint of task %d: %w", s.taskID, err)
	}
	if len(rows) == 0 {
		return false, fmt.Errorf("%w: reading the checkpoint of task %d (attempt %d)", ErrNotHeld, s.taskID, s.attempt)
	}
	if rows[0] == nil {
		return false, nil
	}
	if err := json.Unmarshal(rows[0], v); err != nil {
		return false, fmt.Errorf("skiplock: decoding the checkpoint of task %d: %w", s.taskID, err)
	}
	return true, nil
}
