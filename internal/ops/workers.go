package ops

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/skiplock/skiplock/queue"
)

// The worker processes and what they record in the database: their
// heartbeats, periodic schedules and rate limit windows.

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
	ID     string
	Host   string
	PID    int
	Queues []string
	// Names are the task names it has handlers for, the only ones it
	// claims; nil for a worker that predates this record, which counts as
	// handling every name.
	Names       []string
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
func Workers(ctx context.Context, c *queue.Client) (workers []WorkerInfo, forgotten int, err error) {
	rows, err := queries.WorkerList(ctx, exec(c), 1000)
	if err != nil {
		return nil, 0, fmt.Errorf("listing workers: %w", err)
	}
	for _, r := range rows {
		w := WorkerInfo{
			ID: r.ID, Host: r.Host, PID: int(r.Pid), Queues: r.Queues, Names: r.Names, StartedAt: r.StartedAt, HeartbeatAt: r.HeartbeatAt,
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
func PeriodicSchedules(ctx context.Context, c *queue.Client) ([]PeriodicSchedule, error) {
	rows, err := queries.PeriodicList(ctx, exec(c))
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
func RateLimits(ctx context.Context, c *queue.Client) ([]RateLimitUsage, error) {
	rows, err := queries.RateLimitList(ctx, exec(c))
	if err != nil {
		return nil, fmt.Errorf("listing rate limits: %w", err)
	}
	out := make([]RateLimitUsage, len(rows))
	for i, r := range rows {
		out[i] = RateLimitUsage{Key: r.Key, WindowStart: r.WindowStart, Used: int(r.Used), LastGranted: int(r.LastGranted)}
	}
	return out, nil
}

// RateKeyUsage is the open windows of a per-key rate limit (a worker's
// RateLimit with PerKey): each key of it that claims have used lately has
// a window of its own.
type RateKeyUsage struct {
	// Limit is "name:TASKNAME".
	Limit string
	// Keys is how many keys have a window open now.
	Keys int
	// Used is how many task starts those windows have taken, all keys
	// together.
	Used int
	// WindowStart is when the current window started; the limit and its
	// period live in the workers' configuration.
	WindowStart time.Time
	// Busiest are the keys whose windows have taken the most, most first,
	// at most 10.
	Busiest []KeyUsage
}

// KeyUsage is what one limit key's current window has taken.
type KeyUsage struct {
	// Key is the tasks' limit key (WithLimitKey), "" for tasks without one.
	Key  string
	Used int
}

// maxBusiestKeys is how many keys RateKeyUsage.Busiest lists.
const maxBusiestKeys = 10

// RateKeys lists the per-key rate limits with a window open now, by limit.
// A limit whose keys' windows have all ended is not listed: nothing holds
// its tasks back.
func RateKeys(ctx context.Context, c *queue.Client) ([]RateKeyUsage, error) {
	rows, err := queries.RateKeyList(ctx, exec(c), maxBusiestKeys)
	if err != nil {
		return nil, fmt.Errorf("listing per-key rate limits: %w", err)
	}
	out := make([]RateKeyUsage, len(rows))
	for i, r := range rows {
		u := RateKeyUsage{Limit: r.Scope, Keys: int(r.Keys), Used: int(r.Used), WindowStart: r.WindowStart}
		for j, k := range r.BusiestKeys {
			u.Busiest = append(u.Busiest, KeyUsage{Key: k, Used: int(r.BusiestUsed[j])})
		}
		out[i] = u
	}
	return out, nil
}
