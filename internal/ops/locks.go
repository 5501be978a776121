package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/queue"
)

// Who holds what: the task advisory locks (Locks, LockHolder) and the
// sessions waiting for locks (LockWaits).

// TaskLock is a task advisory lock that a session holds now.
type TaskLock struct {
	// TaskID is the running task the lock guards; 0 when no running task
	// has the lock's key (the task just finished and its lock is being
	// released, or the key belongs to a task of another skiplock table).
	TaskID  int64
	Queue   string
	Name    string
	Attempt int
	// Key is the lock's key: the low 32 bits of the task ID (pg_locks.objid).
	Key int64
	// HeldFor is how long the task has been running.
	HeldFor time.Duration
	// StartedAt is when the task's attempt started; zero when TaskID is 0.
	StartedAt time.Time
	// PID is the backend process of the session that holds the lock;
	// ClientAddr ("" for a Unix socket) and ApplicationName describe it.
	PID             int
	ClientAddr      string
	ApplicationName string
	// WorkerID, WorkerHost and WorkerPID identify the worker process that
	// registered the session; empty when none did.
	WorkerID   string
	WorkerHost string
	WorkerPID  int
	// TaskWorkerID is the worker the task row names as its runner.
	TaskWorkerID string
}

// Locks lists the task locks held now, oldest task first: which session,
// client and worker holds each running task.
func Locks(ctx context.Context, c *queue.Client) ([]TaskLock, error) {
	return locks(ctx, c, 0)
}

// LockHolder returns the lock of the task with the given ID, or nil when
// nobody holds it (the task is not running, or its worker's session is
// gone and the rescuer has yet to notice).
func LockHolder(ctx context.Context, c *queue.Client, id int64) (*TaskLock, error) {
	if id <= 0 {
		return nil, fmt.Errorf("%w: task ID %d is not positive", queue.ErrInvalidRequest, id)
	}
	held, err := locks(ctx, c, id)
	if err != nil {
		return nil, err
	}
	for _, l := range held {
		if l.TaskID == id {
			return &l, nil
		}
	}
	return nil, nil
}

func locks(ctx context.Context, c *queue.Client, taskID int64) ([]TaskLock, error) {
	info, err := schema.Read(ctx, exec(c))
	if err != nil {
		return nil, err
	}
	rows, err := queries.LockList(ctx, exec(c), db.LockListParams{LockClassOid: info.TableOID, TaskID: taskID})
	if err != nil {
		return nil, fmt.Errorf("listing task locks: %w", err)
	}
	out := make([]TaskLock, 0, len(rows))
	for _, r := range rows {
		l := TaskLock{
			Key: r.Key, PID: int(r.Pid), ClientAddr: r.ClientAddr, ApplicationName: r.ApplicationName,
			HeldFor: seconds(r.HeldSeconds),
		}
		if r.TaskID != nil {
			l.TaskID = *r.TaskID
			l.Queue = deref(r.Queue)
			l.Name = deref(r.Name)
			l.Attempt = int(deref(r.Attempt))
			l.TaskWorkerID = deref(r.TaskWorkerID)
			l.StartedAt = deref(r.StartedAt)
		}
		l.WorkerID = deref(r.WorkerID)
		l.WorkerHost = deref(r.WorkerHost)
		l.WorkerPID = int(deref(r.WorkerPid))
		out = append(out, l)
	}
	return out, nil
}

// LockWait is a session of the database waiting for a lock that other
// sessions hold.
type LockWait struct {
	PID             int
	ClientAddr      string
	ApplicationName string
	// WaitEvent is what it waits for: transactionid, tuple, relation,
	// advisory...
	WaitEvent string
	// BlockedBy are the PIDs of the sessions it waits for.
	BlockedBy []int
	// Waiting is how long it has been in its current state.
	Waiting time.Duration
	// Query is the start of the statement that waits.
	Query string
}

// LockWaits lists the sessions of the database that wait for a lock, with
// the sessions blocking them, longest wait first.
func LockWaits(ctx context.Context, c *queue.Client) ([]LockWait, error) {
	rows, err := queries.LockWaitList(ctx, exec(c))
	if err != nil {
		return nil, fmt.Errorf("listing lock waits: %w", err)
	}
	out := make([]LockWait, 0, len(rows))
	for _, r := range rows {
		w := LockWait{
			PID: int(r.Pid), ClientAddr: r.ClientAddr, ApplicationName: r.ApplicationName,
			WaitEvent: r.WaitEvent, Waiting: seconds(r.WaitingSeconds), Query: r.Query,
			BlockedBy: make([]int, len(r.BlockedBy)),
		}
		for i, p := range r.BlockedBy {
			w.BlockedBy[i] = int(p)
		}
		out = append(out, w)
	}
	return out, nil
}
