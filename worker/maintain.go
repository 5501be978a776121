package worker

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
)

// Maintenance jobs elected with LeaderTryLock, each in its own key.
const leaderJobRescuer = 1

// heartbeatInterval is how often a worker refreshes its skiplock_workers row;
// workerRetention is how long rows of stopped workers are kept.
const (
	heartbeatInterval = 10 * time.Second
	workerRetention   = 7 * 24 * time.Hour
	retireInterval    = time.Minute
	retireBatch       = 10000
)

// leaderKey is the bigint advisory key of a maintenance job: the lock class
// in the high half keeps two skiplock schemas apart, and the bigint form
// (objsubid 1 in pg_locks) never collides with task locks (objsubid 2).
func (w *Worker) leaderKey(job uint32) int64 {
	return int64(uint64(uint32(w.classOID))<<32 | uint64(job))
}

// leadership is this worker's standing in the election for one job.
type leadership struct {
	job     uint32
	name    string // the job's row in skiplock_leaders (lease mode)
	gen     uint64 // advisory mode: the lock session generation holding the lock
	leading bool
}

var (
	rescuerJob   = leadership{job: leaderJobRescuer, name: "rescuer"}
	schedulerJob = leadership{job: leaderJobScheduler, name: "scheduler"}
)

// lead keeps or tries to take a job's leadership and reports whether this
// worker leads. In advisory mode the leader holds a session lock, which
// dies with its session; in lease mode it renews a row with an expiry,
// which another worker may take once it expires.
func (w *Worker) lead(ctx context.Context, l *leadership) bool {
	was := l.leading
	if w.lease {
		n, err := w.queries.LeaderLeaseAcquire(ctx, w.pool, db.LeaderLeaseAcquireParams{
			Job: l.name, Holder: w.cfg.WorkerID, TtlMs: w.leaderTTL().Milliseconds(),
		})
		l.leading = err == nil && n == 1
	} else {
		gen, up := w.ls.generation()
		switch {
		case !up:
			l.gen = 0
		case l.gen != gen:
			acquired, g, err := w.ls.tryLeader(w.leaderKey(l.job))
			l.gen = 0
			if err == nil && acquired {
				l.gen = g
			}
		}
		l.leading = l.gen != 0
	}
	if l.leading && !was {
		w.log.Info("skiplock: this worker now runs the "+l.name, "worker_id", w.cfg.WorkerID)
	}
	return l.leading
}

// leaderTTL is how long a lease-mode leader's row outlives its last renewal:
// a few rescue intervals, so a live leader never loses it.
func (w *Worker) leaderTTL() time.Duration { return max(3*w.cfg.RescueInterval, 3*time.Second) }

// resign hands lease-mode leaderships over at once rather than at expiry;
// advisory ones end with the lock session.
func (w *Worker) resign() {
	if !w.lease {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, job := range []string{rescuerJob.name, schedulerJob.name} {
		_ = w.queries.LeaderLeaseRelease(ctx, w.pool, db.LeaderLeaseReleaseParams{Job: job, Holder: w.cfg.WorkerID})
	}
}

// heartbeat renews the leases of this worker's running tasks every third of
// LeaseDuration. A task whose lease could not be renewed is no longer this
// worker's: its handler is cancelled. When renewals fail for a whole lease
// (the database is unreachable), every handler is cancelled: their tasks
// may already run elsewhere.
func (w *Worker) heartbeat(ctx context.Context) {
	tick := time.NewTicker(w.cfg.LeaseDuration / 3)
	defer tick.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		running := w.inflightSnapshot()
		if len(running) == 0 {
			lastOK = time.Now()
			continue
		}
		p := db.TaskLeaseRenewParams{WorkerID: w.cfg.WorkerID, LeaseMs: w.cfg.LeaseDuration.Milliseconds()}
		for _, e := range running {
			p.Ids = append(p.Ids, e.task.ID)
			p.Attempts = append(p.Attempts, int32(e.task.Attempt))
		}
		rctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseDuration/3)
		renewed, err := w.queries.TaskLeaseRenew(rctx, w.pool, p)
		cancel()
		if err != nil {
			if time.Since(lastOK) < w.cfg.LeaseDuration {
				w.log.Warn("skiplock: renewing task leases failed; retrying", "error", err)
				continue
			}
			w.log.Error("skiplock: task leases expired without renewal; cancelling their handlers", "count", len(running), "error", err)
			renewed = nil
		} else {
			lastOK = time.Now()
		}
		ok := make(map[int64]bool, len(renewed))
		for _, id := range renewed {
			ok[id] = true
		}
		lost := 0
		for _, e := range running {
			if !ok[e.task.ID] && !e.settled.Load() {
				w.cancelExecution(e, errLockLost)
				lost++
			}
		}
		if lost > 0 {
			w.cfg.Observer.LockSessionLost(lost)
		}
	}
}

// listen keeps a connection LISTENing on the schema's channels: it wakes
// the claim loop of each notified queue and carries commands to this
// worker. Notifications only hasten things; polls cover any that are missed
// while reconnecting. listening is closed once the first LISTEN holds.
func (w *Worker) listen(ctx context.Context, listening chan<- struct{}) {
	var once sync.Once
	defer once.Do(func() { close(listening) })
	config := w.pool.Config().ConnConfig.Copy()
	if w.lease {
		// A transaction pooler cannot carry LISTEN: it needs a direct
		// connection, or the worker polls.
		if w.cfg.ListenURL == "" {
			return
		}
		c, err := pgx.ParseConfig(w.cfg.ListenURL)
		if err != nil {
			w.log.Error("skiplock: ListenURL is not a connection string; polling instead", "error", err)
			return
		}
		config = c
	}
	if config.RuntimeParams == nil {
		config.RuntimeParams = map[string]string{}
	}
	config.RuntimeParams["application_name"] = "skiplock listener"
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, config)
		if err == nil {
			// LISTEN takes no parameters, so the channels are quoted here.
			_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{w.channel}.Sanitize())
			if err == nil {
				_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{w.control}.Sanitize())
			}
			if err == nil {
				backoff = 100 * time.Millisecond
				once.Do(func() { close(listening) })
				w.wakeAll() // work may have arrived while no one listened
				for {
					n, werr := conn.WaitForNotification(ctx)
					if werr != nil {
						err = werr
						break
					}
					if n.Channel == w.control {
						w.handleControl(n.Payload)
					} else {
						w.wake(n.Payload)
					}
				}
			}
			conn.Close(context.Background())
		}
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("skiplock: listener disconnected; polling until it reconnects", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// handleControl handles a command from the control channel.
func (w *Worker) handleControl(payload string) {
	if rest, ok := strings.CutPrefix(payload, "cancel:"); ok {
		if id, err := strconv.ParseInt(rest, 10, 64); err == nil {
			w.cancelTasks([]int64{id})
		}
	}
}

// cancelTasks cancels the handlers of the given tasks, if they run here.
func (w *Worker) cancelTasks(ids []int64) {
	want := make(map[int64]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	for _, e := range w.inflightSnapshot() {
		if want[e.task.ID] && context.Cause(e.ctx) == nil {
			w.log.Info("skiplock: cancelling task on request", "task_id", e.task.ID, "name", e.task.Name)
			w.cancelExecution(e, ErrCancelled)
		}
	}
}

// health pings the lock session when it is idle, so that its loss is
// noticed, and its tasks' handlers cancelled, within HealthInterval. It also
// looks for cancellation requests whose NOTIFY was missed.
func (w *Worker) health(ctx context.Context) {
	tick := time.NewTicker(w.cfg.HealthInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if w.ls != nil {
				_ = w.ls.pingIfIdle(w.cfg.HealthInterval)
			}
			running := w.inflightSnapshot()
			if len(running) == 0 {
				continue
			}
			ids := make([]int64, len(running))
			for i, e := range running {
				ids[i] = e.task.ID
			}
			cancelled, err := w.queries.TaskCancelRequested(ctx, w.pool, ids)
			if err == nil && len(cancelled) > 0 {
				w.cancelTasks(cancelled)
			}
		}
	}
}

// maintain runs the jobs that exactly one process should run: every worker
// tries to take the rescuer's lock each RescueInterval, and the one holding
// it rescues orphaned tasks. The lock lives in the lock session, so a leader
// that dies or loses its session hands over within one interval.
func (w *Worker) maintain(ctx context.Context) {
	rescue := time.NewTicker(w.cfg.RescueInterval)
	defer rescue.Stop()
	heartbeat := time.NewTicker(heartbeatInterval)
	defer heartbeat.Stop()
	retire := time.NewTicker(w.retireEvery())
	defer retire.Stop()
	rescuer := rescuerJob
	for {
		select {
		case <-ctx.Done():
			return
		case <-retire.C:
			if rescuer.leading {
				w.retire(ctx)
			}
		case <-heartbeat.C:
			if err := w.queries.WorkerHeartbeat(ctx, w.pool, w.cfg.WorkerID); err != nil && ctx.Err() == nil {
				w.log.Warn("skiplock: worker heartbeat", "error", err)
			}
			if rescuer.leading {
				if _, err := w.queries.WorkerPrune(ctx, w.pool, workerRetention.Seconds()); err != nil && ctx.Err() == nil {
					w.log.Warn("skiplock: pruning old worker rows", "error", err)
				}
			}
		case <-rescue.C:
			if w.lead(ctx, &rescuer) {
				w.rescue(ctx)
			}
		}
	}
}

// retireEvery is retireInterval, or less when a retention is shorter.
func (w *Worker) retireEvery() time.Duration {
	d := retireInterval
	for _, r := range []time.Duration{w.cfg.RetainCompleted, w.cfg.RetainFailed, w.cfg.RetainCancelled} {
		if r > 0 {
			d = min(d, max(r/2, 100*time.Millisecond))
		}
	}
	return d
}

// retire deletes finished tasks past their retention, a batch at a time,
// so that no statement holds many row locks or runs long.
func (w *Worker) retire(ctx context.Context) {
	for status, keep := range map[string]time.Duration{
		"completed": w.cfg.RetainCompleted, "failed": w.cfg.RetainFailed, "cancelled": w.cfg.RetainCancelled,
	} {
		if keep < 0 {
			continue
		}
		var total int64
		for ctx.Err() == nil {
			n, err := w.queries.TaskRetire(ctx, w.pool, db.TaskRetireParams{Status: status, OlderThanSeconds: keep.Seconds(), BatchSize: retireBatch})
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("skiplock: deleting finished tasks past their retention", "status", status, "error", err)
				}
				return
			}
			total += n
			if n < retireBatch {
				break
			}
		}
		if total > 0 {
			w.log.Debug("skiplock: deleted finished tasks past their retention", "status", status, "count", total)
		}
	}
}

// rescue returns running tasks whose worker's session ended to the queue.
func (w *Worker) rescue(ctx context.Context) {
	rows, err := w.queries.TaskRescueOrphans(ctx, w.pool, w.classOID)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("skiplock: rescuing orphaned tasks", "error", err)
		}
		return
	}
	if len(rows) == 0 {
		return
	}
	queues := map[string]bool{}
	for _, r := range rows {
		w.cfg.Observer.Rescued(r.Queue, r.Name)
		w.log.Warn("skiplock: rescued task whose worker is gone", "task_id", r.ID, "name", r.Name,
			"attempt", r.Attempt, "now", r.Status, "lost_worker", deref(r.LostWorkerID))
		if r.Status == "pending" {
			queues[r.Queue] = true
		}
	}
	if len(queues) > 0 {
		names := make([]string, 0, len(queues))
		for q := range queues {
			names = append(names, q)
		}
		if err := w.queries.QueueNotify(ctx, w.pool, db.QueueNotifyParams{Channel: w.channel, Queues: names}); err != nil {
			w.log.Warn("skiplock: notifying rescued tasks", "error", err)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
