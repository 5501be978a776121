package queue

import (
	"context"
	"fmt"
	"time"
)

// Counting tasks: Stats per queue and status.

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
