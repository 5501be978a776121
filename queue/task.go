package queue

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/skiplock/skiplock/db"
)

// Status is where a task is in its life. The database stores fewer
// statuses than there are: a stored pending task is StatusPending when it
// is due, StatusScheduled or StatusRetrying while its run time is ahead.
// Task.Status is derived from the stored status, run time and attempt
// when the task is read; Filter.Statuses selects by the same values.
type Status string

const (
	// StatusWaiting tasks wait for the tasks they depend on (WithDependsOn,
	// a Workflow's DependsOn) to complete, or for their turn in their
	// sequence (WithSequence). The claim never reads them: they are
	// outside its index. The completion of their last dependency, or the
	// end of the task ahead of them in their sequence, makes them pending
	// (or scheduled), in the same transaction.
	StatusWaiting Status = "waiting"
	// StatusScheduled tasks were enqueued to run later: attempt 0, RunAt
	// ahead. They become pending at RunAt.
	StatusScheduled Status = "scheduled"
	// StatusPending tasks are due: a worker may claim them now.
	StatusPending Status = "pending"
	// StatusRetrying tasks failed an attempt and wait out the retry
	// backoff: attempt above 0, RunAt ahead. They become pending at RunAt.
	StatusRetrying Status = "retrying"
	// StatusRunning tasks are held by a worker, guarded by its advisory lock.
	StatusRunning Status = "running"
	// StatusCompleted tasks' handlers returned nil.
	StatusCompleted Status = "completed"
	// StatusFailed tasks ran out of attempts or failed permanently. They stay
	// until requeued (skiplock requeue) or purged.
	StatusFailed Status = "failed"
	// StatusCancelled tasks were cancelled before they completed.
	StatusCancelled Status = "cancelled"
)

// Statuses lists every status in life order.
var Statuses = []Status{StatusWaiting, StatusScheduled, StatusPending, StatusRetrying, StatusRunning, StatusCompleted, StatusFailed, StatusCancelled}

// stored is the status column's value for s: pending for the three kinds
// of pending task, s itself otherwise.
func (s Status) stored() Status {
	switch s {
	case StatusScheduled, StatusRetrying:
		return StatusPending
	}
	return s
}

// wait is how the operator queries tell a stored pending task of status s
// apart (their waits parameter); empty for the statuses stored as they are.
func (s Status) wait() string {
	switch s {
	case StatusPending:
		return "due"
	case StatusScheduled, StatusRetrying:
		return string(s)
	}
	return ""
}

// statusAt derives a task's status from its stored columns at now.
func statusAt(stored string, runAt time.Time, attempt int32, now time.Time) Status {
	switch {
	case Status(stored) != StatusPending, !runAt.After(now):
		return Status(stored)
	case attempt > 0:
		return StatusRetrying
	}
	return StatusScheduled
}

// Task is a task as stored in skiplock_tasks.
type Task struct {
	ID       int64
	Queue    string
	Name     string
	Payload  json.RawMessage
	Metadata json.RawMessage
	// Status is the task's status when it was read.
	Status      Status
	Priority    int
	RunAt       time.Time
	Attempt     int
	MaxAttempts int
	// Crashes counts the worker processes that died while the task ran in
	// them (docs/RELIABILITY.md, "Poison tasks"). Above zero the task is a
	// suspect, which a worker runs alone; at the worker's MaxCrashes it is
	// failed. Requeue sets it back to zero.
	Crashes int
	// Timeout is the task's own handler timeout; zero means the worker's.
	Timeout time.Duration
	// Errors holds one entry for each attempt that did not succeed, oldest
	// first. The successful attempt is the task itself: Attempt, WorkerID,
	// StartedAt, FinishedAt.
	Errors     []AttemptError
	WorkerID   string
	CreatedAt  time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
	// Output is the JSON its handler recorded (worker.SetOutput), written
	// with the completion; nil when it recorded none.
	Output json.RawMessage
	// Progress is the JSON its handler last reported while running
	// (worker.SetProgress); nil when none. It stays as the last attempt
	// left it.
	Progress json.RawMessage
	// Checkpoint is the JSON its handler last saved to resume from
	// (worker.SaveCheckpoint); nil when none. It survives retries and is
	// kept when the task completes.
	Checkpoint json.RawMessage
	// UniqueKey is the task's unique key (WithUniqueKey, or the one
	// WithUnique derived), with or without a window; empty for none.
	UniqueKey string
	// ExclusiveKey is the task's exclusive key (WithExclusiveKey); empty
	// for none.
	ExclusiveKey string
	// WorkflowID is the workflow the task belongs to (EnqueueWorkflow,
	// WithDependsOn); 0 for none.
	WorkflowID int64
	// BatchID is the batch the task belongs to, as a member or a callback
	// (EnqueueBatch); 0 for none.
	BatchID int64
	// DependsOn lists the tasks this one waits for; WaitingFor how many of
	// them have not completed.
	DependsOn  []int64
	WaitingFor int
	// Dependents lists the tasks that wait for this one.
	Dependents []int64
	// SequenceKey is the task's sequence (WithSequence); empty for none.
	// SequenceHold is set when a failure for good holds the rest of it
	// (WithSequenceHold).
	SequenceKey  string
	SequenceHold bool
	// ReplaceKey is the task's replace key (WithReplaceKey, WithDebounce);
	// empty for none.
	ReplaceKey string
}

// AttemptError records one attempt that did not succeed.
type AttemptError struct {
	Attempt int `json:"attempt"`
	// Outcome is error, panic, timeout, abandoned, cancelled, rescued,
	// lock_lost, shutdown or no_handler (the last four returned the task
	// to the queue without spending the attempt).
	Outcome string `json:"outcome"`
	Error   string `json:"error"`
	// Permanent is set when the attempt failed the task for good, before
	// its attempts ran out (a worker.Permanent error).
	Permanent bool `json:"permanent,omitempty"`
	// Crash is set on a rescue (outcome rescued) sure that the worker
	// process that ran the attempt died. It is unset when the process
	// lives on (it lost its database session and came back), and when the
	// rescue could not tell yet (the process was heard from moments
	// before): such a death counts in Crashes until the process is heard
	// from again.
	Crash      bool      `json:"crash,omitempty"`
	WorkerID   string    `json:"worker_id,omitempty"`
	Host       string    `json:"host,omitempty"`
	PID        int       `json:"pid,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
}

// taskFromRow converts a stored row.
func taskFromRow(r db.SkiplockTask) (*Task, error) {
	t := &Task{
		ID:          r.ID,
		Queue:       r.Queue,
		Name:        r.Name,
		Payload:     r.Payload,
		Metadata:    r.Metadata,
		Status:      statusAt(r.Status, r.RunAt, r.Attempt, time.Now()),
		Priority:    int(r.Priority),
		RunAt:       r.RunAt,
		Attempt:     int(r.Attempt),
		MaxAttempts: int(r.MaxAttempts),
		Crashes:     int(r.Crashes),
		CreatedAt:   r.CreatedAt,
		StartedAt:   r.StartedAt,
		FinishedAt:  r.FinishedAt,
		Output:      r.Output,
		Progress:    r.Progress,
		Checkpoint:  r.Checkpoint,
		DependsOn:   r.DependsOn,
		Dependents:  r.Dependents,
	}
	if r.WorkflowID != nil {
		t.WorkflowID = *r.WorkflowID
	}
	if r.BatchID != nil {
		t.BatchID = *r.BatchID
	}
	if r.DepsPending != nil {
		t.WaitingFor = int(*r.DepsPending)
	}
	if r.TimeoutMs != nil {
		t.Timeout = time.Duration(*r.TimeoutMs) * time.Millisecond
	}
	if r.WorkerID != nil {
		t.WorkerID = *r.WorkerID
	}
	switch {
	case r.UniqueKey != nil:
		t.UniqueKey = *r.UniqueKey
	case r.UniqueWindowKey != nil:
		// Stored as key@window number.
		t.UniqueKey = *r.UniqueWindowKey
		if i := strings.LastIndexByte(t.UniqueKey, '@'); i >= 0 {
			t.UniqueKey = t.UniqueKey[:i]
		}
	}
	if r.ExclusiveKey != nil {
		t.ExclusiveKey = *r.ExclusiveKey
	}
	if r.SequenceKey != nil {
		t.SequenceKey = *r.SequenceKey
		t.SequenceHold = r.SequenceHold != nil && *r.SequenceHold
	}
	if r.ReplaceKey != nil {
		t.ReplaceKey = *r.ReplaceKey
	}
	if len(r.Errors) > 0 {
		if err := json.Unmarshal(r.Errors, &t.Errors); err != nil {
			return nil, fmt.Errorf("decoding errors of task %d: %w", r.ID, err)
		}
	}
	return t, nil
}
