package worker

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Maintenance jobs that exactly one worker process runs, each elected
// under its own key (advisory mode) or row of skiplock_leaders (lease
// mode).
const (
	leaderJobRescuer   = 1
	leaderJobScheduler = 2
)

// leadership is one job's election, as the guard keeps it.
type leadership struct {
	job     uint32
	name    string    // the job's row in skiplock_leaders (lease mode)
	gen     uint64    // advisory mode: the lock session generation holding the lock
	checked time.Time // advisory mode: when the holder's heartbeat was last checked
	renewed time.Time // lease mode: when the last renewal that held began
	// term counts the times this worker began to lead, as the guard sees
	// it: a lock taken again in a new session, a lease taken again after
	// it may have lapsed. A job whose pass outlived its hold (a pass stuck
	// on a cut network) may lead again at its next try with no try that
	// failed in between: the term says that it is a new leadership.
	term uint64
}

var (
	rescuerJob   = leadership{job: leaderJobRescuer, name: "rescuer"}
	schedulerJob = leadership{job: leaderJobScheduler, name: "scheduler"}
)

// electedJobs names every elected job, for resigning at shutdown.
var electedJobs = []string{rescuerJob.name, schedulerJob.name}

// elector is this worker's candidacy for one job. Its job's loop calls lead
// on each tick and works only while it returns true; other loops may ask
// isLeader. How a leader is chosen, and how a dead one is replaced, is the
// guard's: a session lock that dies with its session, or a row that
// expires.
type elector struct {
	l        leadership
	guard    guard
	log      *slog.Logger
	workerID string
	leading  atomic.Bool
}

func newElector(l leadership, g guard, log *slog.Logger, workerID string) *elector {
	return &elector{l: l, guard: g, log: log, workerID: workerID}
}

// lead keeps or tries to take the leadership and reports whether this
// worker leads.
func (e *elector) lead(ctx context.Context) bool {
	term := e.l.term
	now := e.guard.lead(ctx, &e.l)
	if was := e.leading.Swap(now); now && (!was || e.l.term != term) {
		// Routine (the only worker always wins): debug, so that a worker's
		// start is one line at info.
		e.log.Debug("skiplock: this worker now runs the "+e.l.name, "worker_id", e.workerID)
	}
	return now
}

// term is the leadership's term as the last lead found it; it changes each
// time this worker begins to lead. What a job learned while it led (the
// rescuer's pacing) is of one term: another worker led in between.
// Called by the job's loop, as lead is.
func (e *elector) term() uint64 { return e.l.term }

// isLeader reports what the last lead found.
func (e *elector) isLeader() bool { return e.leading.Load() }
