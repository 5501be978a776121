package queue

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// More operator methods, shared by the skiplock command and the dashboard:
// the queues there are, running waiting tasks now, deleting tasks, and what
// workers, periodic schedules and rate limits are doing.

// QueueInfo is a known queue: its backlog and whether it is paused.
type QueueInfo struct {
	Name string
	// Pending counts every pending task: Due + Retrying + Scheduled.
	Pending   int64
	Due       int64
	Retrying  int64
	Scheduled int64
	// OldestDue is how long the oldest due task has waited past its run
	// time; zero when none is due.
	OldestDue time.Duration
	Running   int64
	Failed    int64
	// PausedAt is when the queue was paused; nil when it is not.
	PausedAt *time.Time
}

// Queues lists the known queues by name: every queue that has tasks, in any
// status, or that was ever paused. It reads indexes whose size is the
// backlog, not the table's history, so it is cheap enough to call often.
func (c *Client) Queues(ctx context.Context) ([]QueueInfo, error) {
	rows, err := c.queries.QueueList(ctx, c.exec)
	if err != nil {
		return nil, fmt.Errorf("listing queues: %w", err)
	}
	out := make([]QueueInfo, len(rows))
	for i, r := range rows {
		out[i] = QueueInfo{
			Name: r.Queue, Pending: r.Pending, Due: r.Due, Retrying: r.Retrying, Scheduled: r.Scheduled,
			OldestDue: seconds(r.OldestDueSeconds), Running: r.Running, Failed: r.Failed, PausedAt: r.PausedAt,
		}
	}
	return out, nil
}

// FinishedCount counts the tasks of one queue that finished with one status
// within one bucket of time.
type FinishedCount struct {
	Queue string
	// Status is StatusCompleted or StatusFailed.
	Status Status
	// Bucket numbers the bucket: it covers [since + Bucket*bucket,
	// since + (Bucket+1)*bucket) of the Throughput call.
	Bucket int
	Count  int64
}

// Throughput counts the tasks that completed and that failed for good at or
// after since, per queue and per bucket of time, in order of queue, status
// and bucket; buckets without tasks are left out. It reads the finished
// tasks' index, so its cost grows with the queues and the tasks finished
// since, not with the table's history. It counts the tasks still stored: a
// purge of recent tasks lowers it.
func (c *Client) Throughput(ctx context.Context, since time.Time, bucket time.Duration) ([]FinishedCount, error) {
	if bucket <= 0 {
		return nil, fmt.Errorf("%w: bucket must be positive, got %s", ErrInvalidRequest, bucket)
	}
	rows, err := c.queries.QueueThroughput(ctx, c.exec, db.QueueThroughputParams{Since: since, BucketSeconds: bucket.Seconds()})
	if err != nil {
		return nil, fmt.Errorf("reading throughput: %w", err)
	}
	out := make([]FinishedCount, len(rows))
	for i, r := range rows {
		out[i] = FinishedCount{Queue: r.Queue, Status: Status(r.Status), Bucket: int(r.Bucket), Count: r.Finished}
	}
	return out, nil
}

// QueueExists reports whether a queue is known: it has tasks, in any
// status, or was paused once. PauseQueue does not ask (a queue may be
// paused before its first task); operator tools do, so that a typo does not
// pause a queue nobody uses.
func (c *Client) QueueExists(ctx context.Context, name string) (bool, error) {
	known, err := c.queries.QueueKnown(ctx, c.exec, name)
	if err != nil {
		return false, fmt.Errorf("looking up queue %q: %w", name, err)
	}
	return known, nil
}

// RecentNamesScan is how many of the newest tasks TaskNames reads.
const RecentNamesScan = 10000

// TaskNames lists the distinct task names among the newest
// RecentNamesScan tasks, sorted: the names a filter is likely to want,
// at a cost that does not grow with the table.
func (c *Client) TaskNames(ctx context.Context) ([]string, error) {
	names, err := c.queries.TaskNamesRecent(ctx, c.exec, RecentNamesScan)
	if err != nil {
		return nil, fmt.Errorf("listing task names: %w", err)
	}
	return names, nil
}

// ChangeResult reports what a change of named tasks did.
type ChangeResult struct {
	// IDs lists the changed tasks, in order.
	IDs []int64
	// Skipped lists the named tasks that were not changed, with their
	// status (empty when no task has the ID).
	Skipped []SkippedTask
}

// namedIDs validates the IDs of a change of named tasks: at least one, all
// positive; sorted, without duplicates.
func namedIDs(ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: name at least one task", ErrInvalidRequest)
	}
	return checkIDs(ids, Filter{})
}

// RunNow makes the named pending tasks that wait for a later run time
// (scheduled, or retrying after a backoff) due now, and wakes the workers
// of their queues. Tasks in another state are skipped: a due task is
// already as early as it gets; other statuses are not waiting. It keeps
// the tasks' attempts, errors and everything else.
func (c *Client) RunNow(ctx context.Context, ids []int64) (ChangeResult, error) {
	res := ChangeResult{IDs: []int64{}}
	ids, err := namedIDs(ids)
	if err != nil {
		return res, err
	}
	work, _, err := c.channels(ctx)
	if err != nil {
		return res, fmt.Errorf("running tasks now: %w", err)
	}
	for chunk := range slices.Chunk(ids, MaxBatch) {
		row, err := c.queries.TaskRunNowMany(ctx, c.exec, db.TaskRunNowManyParams{Ids: chunk, Channel: work})
		if err != nil {
			return res, fmt.Errorf("running tasks now: %w", err)
		}
		res.IDs = append(res.IDs, row.Ids...)
	}
	res.Skipped, err = c.skipped(ctx, c.exec, ids, res.IDs)
	return res, err
}

// Delete deletes the named tasks, with their history, whatever their
// status but running: a worker holds a running task (cancel it, then
// delete it). A task a worker claims while Delete waits for its row is
// running by then, and skipped.
func (c *Client) Delete(ctx context.Context, ids []int64) (ChangeResult, error) {
	return c.delete(ctx, c.exec, ids)
}

// DeleteTx is Delete within tx. Rolled back, it is a dry run: it reports
// what Delete would do, decided by the same statement.
func (c *Client) DeleteTx(ctx context.Context, tx Executor, ids []int64) (ChangeResult, error) {
	return c.delete(ctx, pgerr.Interpreting(tx), ids)
}

func (c *Client) delete(ctx context.Context, x pgerr.Executor, ids []int64) (ChangeResult, error) {
	res := ChangeResult{IDs: []int64{}}
	ids, err := namedIDs(ids)
	if err != nil {
		return res, err
	}
	for chunk := range slices.Chunk(ids, MaxBatch) {
		done, err := c.queries.TaskDeleteMany(ctx, x, chunk)
		if err != nil {
			return res, fmt.Errorf("deleting tasks: %w", err)
		}
		res.IDs = append(res.IDs, done...)
	}
	slices.Sort(res.IDs)
	res.Skipped, err = c.skipped(ctx, x, ids, res.IDs)
	return res, err
}

// Worker liveness. A worker renews its heartbeat every 10 seconds.
const (
	// WorkerGoneAfter is how long after its last heartbeat a worker counts
	// as gone: three missed heartbeats.
	WorkerGoneAfter = 30 * time.Second
	// WorkerForgetAfter is how long after its last heartbeat Workers stops
	// listing a gone worker (its row stays, for the history of its tasks'
	// attempts, until workers prune it).
	WorkerForgetAfter = time.Hour
)

// WorkerInfo is a registered worker process.
type WorkerInfo struct {
	ID          string
	Host        string
	PID         int
	Queues      []string
	StartedAt   time.Time
	HeartbeatAt time.Time
	// LockBackendPID is the PostgreSQL backend of its lock session; 0 in
	// lease mode.
	LockBackendPID int
	// Connected says that its lock session is still connected.
	Connected bool
	// Running counts the tasks it runs now.
	Running int64
	// Gone is set when the worker's heartbeat is older than
	// WorkerGoneAfter, or its lock session has disconnected.
	Gone bool
}

// Workers lists the workers that are live or went away less than
// WorkerForgetAfter ago, live ones first and then by latest heartbeat, and
// how many gone ones it left out.
func (c *Client) Workers(ctx context.Context) (workers []WorkerInfo, forgotten int, err error) {
	rows, err := c.queries.WorkerList(ctx, c.exec, 1000)
	if err != nil {
		return nil, 0, fmt.Errorf("listing workers: %w", err)
	}
	for _, r := range rows {
		w := WorkerInfo{
			ID: r.ID, Host: r.Host, PID: int(r.Pid), Queues: r.Queues, StartedAt: r.StartedAt, HeartbeatAt: r.HeartbeatAt,
			LockBackendPID: int(r.LockBackendPid), Connected: r.Connected, Running: r.Running,
		}
		since := seconds(r.HeartbeatAgeSeconds)
		w.Gone = since > WorkerGoneAfter || (w.LockBackendPID != 0 && !w.Connected)
		if w.Gone && since > WorkerForgetAfter {
			forgotten++
			continue
		}
		workers = append(workers, w)
	}
	slices.SortStableFunc(workers, func(a, b WorkerInfo) int {
		switch {
		case a.Gone == b.Gone:
			return 0
		case b.Gone:
			return -1
		}
		return 1
	})
	return workers, forgotten, nil
}

// PeriodicSchedule is a periodic schedule that a worker has run.
type PeriodicSchedule struct {
	// ID is the schedule's ID (worker.Periodic.ID).
	ID string
	// LastTick is the last tick enqueued, or for a schedule that has not
	// ticked yet, the tick it started after.
	LastTick time.Time
	// UpdatedAt is when a worker last recorded a tick.
	UpdatedAt time.Time
}

// PeriodicSchedules lists the periodic schedules that workers have run, by
// ID. Their cron expressions live in the workers' configuration, not in
// the database.
func (c *Client) PeriodicSchedules(ctx context.Context) ([]PeriodicSchedule, error) {
	rows, err := c.queries.PeriodicList(ctx, c.exec)
	if err != nil {
		return nil, fmt.Errorf("listing periodic schedules: %w", err)
	}
	out := make([]PeriodicSchedule, len(rows))
	for i, r := range rows {
		out[i] = PeriodicSchedule{ID: r.Schedule, LastTick: r.LastTick, UpdatedAt: r.UpdatedAt}
	}
	return out, nil
}

// RateLimitUsage is the current window of a shared rate limit.
type RateLimitUsage struct {
	// Key is "queue:NAME" or "name:TASKNAME".
	Key string
	// WindowStart is when the limit's latest window started; the limit and
	// its period live in the workers' configuration.
	WindowStart time.Time
	// Used is how much of that window claims have taken.
	Used int
	// LastGranted is how many the latest claim got.
	LastGranted int
}

// RateLimits lists the shared rate limits that workers have used, by key.
func (c *Client) RateLimits(ctx context.Context) ([]RateLimitUsage, error) {
	rows, err := c.queries.RateLimitList(ctx, c.exec)
	if err != nil {
		return nil, fmt.Errorf("listing rate limits: %w", err)
	}
	out := make([]RateLimitUsage, len(rows))
	for i, r := range rows {
		out[i] = RateLimitUsage{Key: r.Key, WindowStart: r.WindowStart, Used: int(r.Used), LastGranted: int(r.LastGranted)}
	}
	return out, nil
}
