package worker

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"
)

// Maintenance jobs that exactly one worker process runs, each elected
// under its own key (advisory mode) or row of skiplock_leaders (lease
// mode).
const (
	leaderJobRescuer   = 1
	leaderJobScheduler = 2 // the stored schedules' scheduler
	// leaderJobDeclared marks the jobs of the declared schedules'
	// schedulers (declaredJob): bit 30 set, with a hash of the set of
	// names below it. Bit 31 is the claim turns' (ClaimTurn), and
	// the jobs above are small numbers: the three never meet.
	leaderJobDeclared = 1 << 30
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

// electedJobs names every elected job of fixed name, for resigning at
// shutdown (a worker with Config.Periodic resigns its declaredJob too).
var electedJobs = []string{rescuerJob.name, schedulerJob.name}

// declaredJob is the election of the scheduler of a set of declared
// schedules (Config.Periodic), named by a hash of the set's names: the
// workers that declare the same names elect one scheduler among them, and
// a worker that declares another set (another binary, a rolling deploy)
// elects its own, so that whatever the others declare, a schedule is
// ticked while one live worker declares it. Schedules in two sets may be
// ticked by two schedulers at once, which enqueue each tick once (the
// last tick's row lock and the tick's unique key). In advisory mode the
// key is 30 bits of the hash: two different sets share a key, and one
// of them goes unticked while the other's scheduler leads, with a chance
// of about one in a billion per pair of sets; the lease row's name has
// 64 bits.
func declaredJob(schedules []schedule) leadership {
	names := make([]string, len(schedules))
	for i, s := range schedules {
		names[i] = s.Name
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		// Length-prefixed: no two sets hash the same bytes.
		h.Write(binary.AppendUvarint(nil, uint64(len(n))))
		h.Write([]byte(n))
	}
	sum := binary.BigEndian.Uint64(h.Sum(nil))
	return leadership{
		job:  leaderJobDeclared | uint32(sum)&(leaderJobDeclared-1),
		name: fmt.Sprintf("scheduler:%016x", sum),
	}
}

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

// electedJobs names the elections this worker may hold, for resigning at
// shutdown.
func (w *Worker) electedJobs() []string {
	if len(w.schedules) == 0 {
		return electedJobs
	}
	return append(slices.Clip(electedJobs), w.declared.name)
}
