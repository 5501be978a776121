package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/db"
)

// Counting tasks: Stats per queue and status, Throughput over time.

// Stats summarizes the tasks of every queue.
type Stats struct {
	// Queues has one entry per queue that has tasks or is paused, by name.
	Queues []QueueStats
	// Total adds up every queue; its Queue is empty and its OldestDue is
	// the oldest of all.
	Total QueueStats
}

// QueueStats summarizes one queue's tasks: how many are in each status
// (Pending counts the due ones: the backlog).
type QueueStats struct {
	Queue     string
	Waiting   int64
	Scheduled int64
	Pending   int64
	Retrying  int64
	Running   int64
	Completed int64
	Failed    int64
	Cancelled int64
	// PausedAt is when the queue was paused; nil when it is not (and in
	// the total).
	PausedAt *time.Time
	// OldestDue is how long the oldest pending (due) task has waited past
	// its run time; zero when none is.
	OldestDue time.Duration
	// Recent counts the tasks that finished over the last 1, 5 and 15
	// minutes, in that order. It counts the finished tasks still stored:
	// purging tasks that finished within the window lowers it.
	Recent []WindowStats
}

// WindowStats counts the tasks that finished within a window of time up to
// now.
type WindowStats struct {
	Window    time.Duration
	Completed int64
	// Failed counts tasks that failed for good (out of attempts, or failed
	// permanently), not attempts that will be retried.
	Failed int64
}

// PerMinute is the window's throughput: completed tasks per minute.
func (w WindowStats) PerMinute() float64 {
	if w.Window <= 0 {
		return 0
	}
	return float64(w.Completed) / w.Window.Minutes()
}

// FailureRate is the share of finished tasks that failed, 0 to 1; 0 when
// none finished.
func (w WindowStats) FailureRate() float64 {
	if w.Completed+w.Failed == 0 {
		return 0
	}
	return float64(w.Failed) / float64(w.Completed+w.Failed)
}

// StatsWindows are the windows of QueueStats.Recent.
var StatsWindows = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}

// Stats counts tasks per queue and status, measures the backlog and the
// recent throughput. It reads the whole table once.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	rows, err := c.queries.QueueStats(ctx, c.exec)
	if err != nil {
		return nil, fmt.Errorf("reading queue stats: %w", err)
	}
	s := &Stats{Queues: make([]QueueStats, 0, len(rows))}
	total := QueueStats{Recent: make([]WindowStats, len(StatsWindows))}
	for i, w := range StatsWindows {
		total.Recent[i].Window = w
	}
	for _, r := range rows {
		q := QueueStats{
			Queue: r.Queue, Waiting: r.Waiting, Scheduled: r.Scheduled, Pending: r.Pending, Retrying: r.Retrying,
			Running: r.Running, Completed: r.Completed, Failed: r.Failed, Cancelled: r.Cancelled,
			OldestDue: seconds(r.OldestDueSeconds), PausedAt: r.PausedAt,
			Recent: []WindowStats{
				{Window: StatsWindows[0], Completed: r.Completed1m, Failed: r.Failed1m},
				{Window: StatsWindows[1], Completed: r.Completed5m, Failed: r.Failed5m},
				{Window: StatsWindows[2], Completed: r.Completed15m, Failed: r.Failed15m},
			},
		}
		s.Queues = append(s.Queues, q)
		total.Add(q)
	}
	s.Total = total
	return s, nil
}

// Add adds q's counts to s, as Stats.Total adds up its queues (and as the
// totals of several shards add up): counts and windows add, the oldest due
// wait is the longer of the two.
func (s *QueueStats) Add(q QueueStats) {
	s.Waiting += q.Waiting
	s.Scheduled += q.Scheduled
	s.Pending += q.Pending
	s.Retrying += q.Retrying
	s.Running += q.Running
	s.Completed += q.Completed
	s.Failed += q.Failed
	s.Cancelled += q.Cancelled
	s.OldestDue = max(s.OldestDue, q.OldestDue)
	for i, w := range q.Recent {
		if i >= len(s.Recent) {
			s.Recent = append(s.Recent, WindowStats{Window: w.Window})
		}
		s.Recent[i].Completed += w.Completed
		s.Recent[i].Failed += w.Failed
	}
}

// Unhandled counts the pending tasks of one name in one queue that no live
// worker handles: none whose heartbeat is within WorkerGoneAfter both
// claims from the queue and has a handler for the name. Workers claim only
// the names they have handlers for, so these tasks wait, their attempts
// unspent, until a worker that handles them starts.
type Unhandled struct {
	Queue string
	Name  string
	// Tasks counts them, due or not.
	Tasks int64
	// OldestCreatedAt is when the oldest of them was enqueued, and
	// OldestRunAt the earliest run time among them.
	OldestCreatedAt time.Time
	OldestRunAt     time.Time
}

// Unhandled lists, by queue and name, the pending tasks that no live worker
// handles. A worker records the names it handles when it starts; one built
// before skiplock recorded them counts as handling every name of its
// queues. Like Stats, it reads every pending task.
func (c *Client) Unhandled(ctx context.Context) ([]Unhandled, error) {
	rows, err := c.queries.TaskUnhandled(ctx, c.exec, WorkerGoneAfter.Seconds())
	if err != nil {
		return nil, fmt.Errorf("reading tasks without a handler: %w", err)
	}
	out := make([]Unhandled, len(rows))
	for i, r := range rows {
		out[i] = Unhandled{Queue: r.Queue, Name: r.Name, Tasks: r.Tasks, OldestCreatedAt: r.OldestCreatedAt, OldestRunAt: r.OldestRunAt}
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
