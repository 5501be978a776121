package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/skiplock/skiplock/db"
)

// rescuer returns to the queue the running tasks whose worker is gone: an
// advisory lock nobody holds (its session ended) or a lease that expired.
// Every worker runs one and tries to win the rescuer's election each
// interval (RescueInterval); the one that leads rescues. A leader that dies
// or loses its session hands over within one interval.
type rescuer struct {
	elector  *elector
	queries  *db.Queries
	pool     db.DBTX
	classOID int64  // the advisory lock class of task locks
	channel  string // the work channel, to wake claimers of rescued tasks
	interval time.Duration
	// self is this worker's ID, and mode how it guards its tasks: the
	// rescuer may find its own tasks orphaned, after it lost its lock
	// session (or its leases expired) and came back, and says so.
	self string
	mode Mode
	// beforeRescue runs before each pass (guard.beforeRescue).
	beforeRescue func(ctx context.Context)
	observer     Observer
	log          *slog.Logger
	passed       func() // after each pass, if set (a test signal)
	// The two parts of a pass log a database that went away once, not
	// once per pass: the leader may pass again before it learns that its
	// election's session is gone too. Made on first use.
	orphansDown, sequencesDown *outage
}

// failed logs a part's failure through its outage; failures that a
// context's end caused are not logged.
func (r *rescuer) failed(ctx context.Context, o **outage, what string, err error) {
	if ctx.Err() == nil {
		outageOf(o, r.log, what).failed(err)
	}
}

// A pass reads every entry of the running index. Vacuum removes the
// entries of tasks that finished, and a scan that finds one dead to every
// transaction marks it so that later scans skip it; while a transaction
// holds the xmin horizon back (a session idle in transaction, a long
// report, a replica's feedback), neither can happen, and every pass visits
// the row of every task that ran since the horizon was pinned. Held at
// 5,000 tasks/s, a pass took at least 0.9 s after 5 minutes and 3.7 s after
// 14, and passes every second ran back to back: one backend busy, reading
// the table's old pages through the server's buffers, for the rest of the
// pin. So a pass that rescued nothing is followed by the next no sooner
// than rescueRatio times what it took: a pass of 100 ms or less keeps the
// default interval, one of 2 s waits 20 s. A pass that rescued tasks is
// followed at the next interval, whatever it cost: where there were
// orphans there may be more.
const rescueRatio = 10

// rescuePacer says when the rescuer's next pass is due.
type rescuePacer struct {
	due time.Time
}

// ready reports whether a pass is due at now.
func (p *rescuePacer) ready(now time.Time) bool { return !now.Before(p.due) }

// passed records a pass that started at, took took and rescued rescued
// tasks.
func (p *rescuePacer) passed(started time.Time, took time.Duration, rescued int) {
	if rescued > 0 {
		p.due = time.Time{}
		return
	}
	p.due = started.Add(rescueRatio * took)
}

func (r *rescuer) run(ctx context.Context) {
	var pace rescuePacer
	var told time.Time // when a slow pass was last logged
	every(ctx, r.interval, func(ctx context.Context) {
		// The election is kept every interval, passes or not: a lease
		// left unrenewed would hand the job to another worker.
		if !r.elector.lead(ctx) {
			pace = rescuePacer{} // a leader again starts with a pass
			return
		}
		started := time.Now()
		if !pace.ready(started) {
			return
		}
		r.beforeRescue(ctx)
		rescued := r.rescue(ctx)
		took := time.Since(started)
		pace.passed(started, took, rescued)
		if wait := pace.due.Sub(started); wait > 2*r.interval && time.Since(told) > time.Minute {
			told = time.Now()
			r.log.Info("skiplock: a rescue pass was slow, so the next waits longer; a transaction that holds back "+
				"the xmin horizon (idle in transaction, a long query, a replica's feedback) is a common cause",
				"took", took.Round(time.Millisecond), "next_in", wait.Round(time.Millisecond))
		}
		if r.passed != nil {
			r.passed()
		}
	})
}

// rescue is one pass: orphaned tasks, then stalled sequences. It reports
// how many tasks it rescued.
func (r *rescuer) rescue(ctx context.Context) int {
	rescued := r.rescueOrphans(ctx)
	r.releaseSequences(ctx)
	return rescued
}

// releaseSequences makes pending the next task of each sequence whose
// waiting tasks have nothing ahead of them: a release that the trigger left
// because a producer of the key held its lock (see migration 11).
func (r *rescuer) releaseSequences(ctx context.Context) {
	rows, err := r.queries.SequenceReleaseStalled(ctx, r.pool, r.channel)
	if err != nil {
		r.failed(ctx, &r.sequencesDown, "releasing stalled sequences", err)
		return
	}
	r.sequencesDown.ok()
	if len(rows) > 0 {
		ids := make([]int64, len(rows))
		for i, row := range rows {
			ids[i] = row.ReleasedID
		}
		r.log.Debug("skiplock: released the next task of stalled sequences", "count", len(rows), "task_ids", firstIDs(ids))
	}
}

func (r *rescuer) rescueOrphans(ctx context.Context) int {
	rows, err := r.queries.TaskRescueOrphans(ctx, r.pool, r.classOID)
	if err != nil {
		r.failed(ctx, &r.orphansDown, "rescuing orphaned tasks", err)
		return 0
	}
	r.orphansDown.ok()
	if len(rows) == 0 {
		return 0
	}
	// One line per lost worker and pass, not per task: a storm of lost
	// sessions rescues thousands.
	queues := map[string]bool{}
	byWorker := map[string][]int64{}
	failed := map[string]int{}
	for _, row := range rows {
		r.observer.Rescued(row.Queue, row.Name)
		lost := deref(row.LostWorkerID)
		byWorker[lost] = append(byWorker[lost], row.ID)
		if row.Status == "pending" {
			queues[row.Queue] = true
		} else {
			failed[lost]++
		}
	}
	for lost, ids := range byWorker {
		if lost == r.self && lost != "" {
			// This worker lives: what it lost is what guarded its tasks.
			r.log.Warn(r.selfMessage(), "worker_id", lost, "returned_to_queue", len(ids)-failed[lost],
				"failed_out_of_attempts", failed[lost], "task_ids", firstIDs(ids))
			continue
		}
		r.log.Warn("skiplock: rescued tasks whose worker is gone", "lost_worker", lost, "count", len(ids),
			"failed_out_of_attempts", failed[lost], "task_ids", firstIDs(ids))
	}
	if len(queues) > 0 {
		names := make([]string, 0, len(queues))
		for q := range queues {
			names = append(names, q)
		}
		if err := r.queries.QueueNotify(ctx, r.pool, db.QueueNotifyParams{Channel: r.channel, Queues: names}); err != nil {
			r.log.Warn("skiplock: notifying rescued tasks", "error", err)
		}
	}
	return len(rows)
}

// selfMessage is the line for this worker's own rescued tasks: it is not
// gone, it lost its guard of them and has since come back.
func (r *rescuer) selfMessage() string {
	if r.mode == ModeLease {
		return "skiplock: this worker's leases expired before it could renew them (the database was out of reach); " +
			"its running tasks were returned to the queue"
	}
	return "skiplock: this worker's lock session was lost (a server restart, a failover or a network cut); " +
		"its running tasks were returned to the queue"
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
