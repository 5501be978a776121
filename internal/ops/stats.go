package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/queue"
)

// Counting tasks beyond queue.Client.Stats: the pending tasks no live
// worker handles, and the finished tasks over time.

// UnhandledTasks counts the pending tasks of one name in one queue that no live
// worker handles: none whose heartbeat is within WorkerGoneAfter both
// claims from the queue and has a handler for the name. Workers claim only
// the names they have handlers for, so these tasks wait, their attempts
// unspent, until a worker that handles them starts.
type UnhandledTasks struct {
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
// queues. Like queue.Client.Stats, it reads every pending task.
func Unhandled(ctx context.Context, c *queue.Client) ([]UnhandledTasks, error) {
	rows, err := queries.TaskUnhandled(ctx, exec(c), WorkerGoneAfter.Seconds())
	if err != nil {
		return nil, fmt.Errorf("reading tasks without a handler: %w", err)
	}
	out := make([]UnhandledTasks, len(rows))
	for i, r := range rows {
		out[i] = UnhandledTasks{Queue: r.Queue, Name: r.Name, Tasks: r.Tasks, OldestCreatedAt: r.OldestCreatedAt, OldestRunAt: r.OldestRunAt}
	}
	return out, nil
}

// FinishedCount counts the tasks of one queue that finished with one status
// within one bucket of time.
type FinishedCount struct {
	Queue string
	// Status is queue.StatusCompleted or queue.StatusFailed.
	Status queue.Status
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
func Throughput(ctx context.Context, c *queue.Client, since time.Time, bucket time.Duration) ([]FinishedCount, error) {
	if bucket <= 0 {
		return nil, fmt.Errorf("%w: bucket must be positive, got %s", queue.ErrInvalidRequest, bucket)
	}
	rows, err := queries.QueueThroughput(ctx, exec(c), db.QueueThroughputParams{Since: since, BucketSeconds: bucket.Seconds()})
	if err != nil {
		return nil, fmt.Errorf("reading throughput: %w", err)
	}
	out := make([]FinishedCount, len(rows))
	for i, r := range rows {
		out[i] = FinishedCount{Queue: r.Queue, Status: queue.Status(r.Status), Bucket: int(r.Bucket), Count: r.Finished}
	}
	return out, nil
}
