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
)

// leaderKey is the bigint advisory key of a maintenance job: the lock class
// in the high half keeps two skiplock schemas apart, and the bigint form
// (objsubid 1 in pg_locks) never collides with task locks (objsubid 2).
func (w *Worker) leaderKey(job uint32) int64 {
	return int64(uint64(uint32(w.ls.classOID))<<32 | uint64(job))
}

// listen keeps a connection LISTENing on the schema's channels: it wakes
// the claim loop of each notified queue and carries commands to this
// worker. Notifications only hasten things; polls cover any that are missed
// while reconnecting. listening is closed once the first LISTEN holds.
func (w *Worker) listen(ctx context.Context, listening chan<- struct{}) {
	var once sync.Once
	defer once.Do(func() { close(listening) })
	config := w.pool.Config().ConnConfig.Copy()
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
			_ = w.ls.pingIfIdle(w.cfg.HealthInterval)
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
	var leaderGen uint64 // generation of the session holding the lock; 0: not leader
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if err := w.queries.WorkerHeartbeat(ctx, w.pool, w.cfg.WorkerID); err != nil && ctx.Err() == nil {
				w.log.Warn("skiplock: worker heartbeat", "error", err)
			}
			if leaderGen != 0 {
				if _, err := w.queries.WorkerPrune(ctx, w.pool, workerRetention.Seconds()); err != nil && ctx.Err() == nil {
					w.log.Warn("skiplock: pruning old worker rows", "error", err)
				}
			}
		case <-rescue.C:
			gen, up := w.ls.generation()
			if !up {
				leaderGen = 0
				continue
			}
			if leaderGen != gen {
				acquired, g, err := w.ls.tryLeader(w.leaderKey(leaderJobRescuer))
				if err != nil || !acquired {
					leaderGen = 0
					continue
				}
				leaderGen = g
				w.log.Info("skiplock: this worker now runs the rescuer", "worker_id", w.cfg.WorkerID)
			}
			w.rescue(ctx)
		}
	}
}

// rescue returns running tasks whose worker's session ended to the queue.
func (w *Worker) rescue(ctx context.Context) {
	rows, err := w.queries.TaskRescueOrphans(ctx, w.pool, w.ls.classOID)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("skiplock: rescuing orphaned tasks", "error", err)
		}
		return
	}
	if len(rows) == 0 {
		return
	}
	w.cfg.Observer.Rescued(len(rows))
	queues := map[string]bool{}
	for _, r := range rows {
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
