package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

// statsJSON is one queue of `stats --json`; the total has queue "".
type statsJSON struct {
	Queue            string       `json:"queue"`
	Waiting          int64        `json:"waiting"`
	Scheduled        int64        `json:"scheduled"`
	Pending          int64        `json:"pending"`
	Retrying         int64        `json:"retrying"`
	PausedAt         *time.Time   `json:"paused_at"`
	Running          int64        `json:"running"`
	Completed        int64        `json:"completed"`
	Failed           int64        `json:"failed"`
	Cancelled        int64        `json:"cancelled"`
	OldestDueSeconds float64      `json:"oldest_due_seconds"`
	Recent           []windowJSON `json:"recent"`
}

// unhandledJSON is one name of `stats --json`'s unhandled: pending tasks
// that no live worker handles.
type unhandledJSON struct {
	Queue           string    `json:"queue"`
	Name            string    `json:"name"`
	Tasks           int64     `json:"tasks"`
	OldestCreatedAt time.Time `json:"oldest_created_at"`
	OldestRunAt     time.Time `json:"oldest_run_at"`
}

type windowJSON struct {
	Minutes     int     `json:"minutes"`
	Completed   int64   `json:"completed"`
	Failed      int64   `json:"failed"`
	PerMinute   float64 `json:"per_minute"`
	FailureRate float64 `json:"failure_rate"`
}

func toStatsJSON(q queue.QueueStats) statsJSON {
	out := statsJSON{
		Queue: q.Queue, Waiting: q.Waiting, Scheduled: q.Scheduled, Pending: q.Pending, Retrying: q.Retrying, PausedAt: q.PausedAt,
		Running: q.Running, Completed: q.Completed,
		Failed: q.Failed, Cancelled: q.Cancelled, OldestDueSeconds: q.OldestDue.Seconds(),
		Recent: make([]windowJSON, len(q.Recent)),
	}
	for i, w := range q.Recent {
		out.Recent[i] = windowJSON{
			Minutes: int(w.Window.Minutes()), Completed: w.Completed, Failed: w.Failed,
			PerMinute: w.PerMinute(), FailureRate: w.FailureRate(),
		}
	}
	return out
}

func (a *app) statsCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:   "stats",
		Short: "Counts per queue and status, backlog age, throughput and failure rate",
		Long: `Show, for each queue (paused ones too, marked): tasks per status
(waiting, scheduled to run later, pending: due now, retrying: waiting out
a retry's backoff, running, completed, failed, cancelled); how long the
oldest pending task has waited past its run time; and, over the last 1, 5 and 15 minutes, tasks
completed per minute and the failure rate (tasks that failed for good, out
of all that finished).

The rates count the finished tasks still in the table: purging tasks that
finished in the last 15 minutes (purge --older-than below 15m) lowers them.

Below the table, pending tasks that wait for a handler nobody runs: per
queue and name, the tasks that no live worker both claims from the queue
and has a handler for (workers claim only the names they handle, so these
wait, attempts unspent, until a worker that handles them starts), with
their count and when the oldest was enqueued. A worker that predates
skiplock recording its names counts as handling every name.

It reads the whole table once, and the pending tasks once more; on a very
large table it takes a moment.`,
		Example: `  skiplock stats
  skiplock stats --json | jq '.queues[] | select(.oldest_due_seconds > 60)'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.sharded() {
				return a.shardedStats(cmd.Context())
			}
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			s, err := client.Stats(cmd.Context())
			if err != nil {
				return err
			}
			unhandled, err := ops.Unhandled(cmd.Context(), client)
			if err != nil {
				return err
			}
			if a.json {
				out := struct {
					Queues    []statsJSON     `json:"queues"`
					Total     statsJSON       `json:"total"`
					Unhandled []unhandledJSON `json:"unhandled"`
				}{Queues: make([]statsJSON, len(s.Queues)), Total: toStatsJSON(s.Total), Unhandled: make([]unhandledJSON, len(unhandled))}
				for i, q := range s.Queues {
					out.Queues[i] = toStatsJSON(q)
				}
				for i, u := range unhandled {
					out.Unhandled[i] = unhandledJSON{Queue: u.Queue, Name: u.Name, Tasks: u.Tasks, OldestCreatedAt: u.OldestCreatedAt, OldestRunAt: u.OldestRunAt}
				}
				return a.printJSON(out)
			}
			if len(s.Queues) == 0 {
				fmt.Fprintln(a.env.Stdout, "No tasks, and no paused queues.")
				return nil
			}
			tw := table(a.env.Stdout, append([]string{"QUEUE", "STATE", "WAITING", "SCHEDULED", "PENDING", "OLDEST DUE", "RETRYING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"},
				recentHeads()...)...)
			line := func(q queue.QueueStats, name string) { row(tw, statsCells(q, name)...) }
			for _, q := range s.Queues {
				line(q, q.Queue)
			}
			if len(s.Queues) > 1 {
				line(s.Total, "(all)")
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(unhandled) > 0 {
				fmt.Fprintln(a.env.Stdout, "\nWaiting for a handler (no live worker handles these names):")
				tw := table(a.env.Stdout, "QUEUE", "NAME", "TASKS", "OLDEST")
				for _, u := range unhandled {
					row(tw, u.Queue, u.Name, count(u.Tasks), ago(u.OldestCreatedAt))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			limits, err := client.Limits(cmd.Context())
			if err != nil || len(limits) == 0 {
				return err
			}
			fmt.Fprintln(a.env.Stdout, "\nConcurrency limits (cluster-wide):")
			return a.printLimits(limits, false)
		},
	})
}

// statsCells is the row of stats' table for q, named name.
func statsCells(q queue.QueueStats, name string) []any {
	state := "active"
	switch {
	case q.PausedAt != nil:
		state = "paused"
	case name == "(all)":
		state = ""
	}
	oldest := "-"
	if q.Pending > 0 {
		oldest = short(q.OldestDue)
	}
	cells := []any{name, state, count(q.Waiting), count(q.Scheduled), count(q.Pending), oldest, count(q.Retrying), count(q.Running), count(q.Completed),
		count(q.Failed), count(q.Cancelled)}
	var fails []any
	for i, w := range q.Recent {
		if i == 0 {
			cells = append(cells, count(w.Completed))
		} else {
			cells = append(cells, fmt.Sprintf("%.1f", w.PerMinute()))
		}
		fails = append(fails, fmt.Sprintf("%.0f%%", 100*w.FailureRate()))
	}
	return append(cells, fails...)
}

// recentHeads heads the columns of the recent windows (queue.StatsWindows):
// tasks completed in the first (the last minute), completed per minute on
// average over the others, then the failure rate over each.
func recentHeads() []string {
	var done, failed []string
	for i, w := range queue.StatsWindows {
		span := strings.ToUpper(short(w))
		if i == 0 {
			done = append(done, "DONE LAST "+span)
		} else {
			done = append(done, "AVG/MIN "+span)
		}
		failed = append(failed, "FAILED% "+span)
	}
	return append(done, failed...)
}

// lockJSON is a held task lock in --json output.
type lockJSON struct {
	TaskID          int64      `json:"task_id,omitempty"`
	Queue           string     `json:"queue,omitempty"`
	Name            string     `json:"name,omitempty"`
	Attempt         int        `json:"attempt,omitempty"`
	Key             int64      `json:"key"`
	StartedAt       *time.Time `json:"started_at,omitempty"`
	HeldSeconds     float64    `json:"held_seconds"`
	PID             int        `json:"pid"`
	ClientAddr      string     `json:"client_addr"`
	ApplicationName string     `json:"application_name"`
	WorkerID        string     `json:"worker_id,omitempty"`
	WorkerHost      string     `json:"worker_host,omitempty"`
	WorkerPID       int        `json:"worker_pid,omitempty"`
}

func toLockJSON(l ops.TaskLock) lockJSON {
	return lockJSON{
		TaskID: l.TaskID, Queue: l.Queue, Name: l.Name, Attempt: l.Attempt, Key: l.Key,
		StartedAt: timePtr(l.StartedAt), HeldSeconds: l.HeldFor.Seconds(), PID: l.PID, ClientAddr: l.ClientAddr,
		ApplicationName: l.ApplicationName, WorkerID: l.WorkerID, WorkerHost: l.WorkerHost, WorkerPID: l.WorkerPID,
	}
}

type waitJSON struct {
	PID             int     `json:"pid"`
	ClientAddr      string  `json:"client_addr"`
	ApplicationName string  `json:"application_name"`
	WaitEvent       string  `json:"wait_event"`
	BlockedBy       []int   `json:"blocked_by"`
	WaitingSeconds  float64 `json:"waiting_seconds"`
	Query           string  `json:"query"`
}

func (a *app) locksCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:   "locks",
		Short: "Who holds which task lock now, and who waits for a lock",
		Long: `List the task advisory locks held now, oldest task first: the task, how long
it has run, the PostgreSQL backend (pid) that holds the lock, its client
address and application_name, and the worker process that registered it.

Then list the sessions of this database that wait for a lock, with the
sessions blocking them (pg_blocking_pids): a long wait there is a stuck
transaction, a migration waiting for its table lock, or a contended row.

Then the named locks of application code (package worker/lock): session
and transaction locks with their names, mode and the session holding them,
and leases with their holder, fencing token and expiry.`,
		Example: `  skiplock locks
  skiplock locks --json | jq '.locks[] | select(.held_seconds > 600)'
  skiplock locks --json | jq '.leases[] | select(.expired)'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			locks, err := ops.Locks(cmd.Context(), client)
			if err != nil {
				return err
			}
			waits, err := ops.LockWaits(cmd.Context(), client)
			if err != nil {
				return err
			}
			named, leases, err := namedLocks(cmd.Context(), a.pool)
			if err != nil {
				return err
			}
			if a.json {
				out := struct {
					Locks      []lockJSON      `json:"locks"`
					Waits      []waitJSON      `json:"waits"`
					NamedLocks []namedLockJSON `json:"named_locks"`
					Leases     []leaseJSON     `json:"leases"`
				}{Locks: make([]lockJSON, len(locks)), Waits: make([]waitJSON, len(waits))}
				out.NamedLocks, out.Leases = namedLocksJSON(named, leases)
				for i, l := range locks {
					out.Locks[i] = toLockJSON(l)
				}
				for i, w := range waits {
					out.Waits[i] = waitJSON{
						PID: w.PID, ClientAddr: w.ClientAddr, ApplicationName: w.ApplicationName, WaitEvent: w.WaitEvent,
						BlockedBy: w.BlockedBy, WaitingSeconds: w.Waiting.Seconds(), Query: w.Query,
					}
				}
				return a.printJSON(out)
			}
			w := a.env.Stdout
			if len(locks) == 0 {
				fmt.Fprintln(w, "No task locks are held.")
			} else {
				fmt.Fprintf(w, "Task locks held (%d):\n", len(locks))
				tw := table(w, "TASK", "NAME", "QUEUE", "HELD FOR", "PID", "CLIENT", "APPLICATION", "WORKER")
				for _, l := range locks {
					task, held := "-", "-"
					if l.TaskID != 0 {
						task, held = fmt.Sprint(l.TaskID), short(l.HeldFor)
					}
					worker := "-"
					if l.WorkerID != "" {
						worker = fmt.Sprintf("%s (%s pid %d)", l.WorkerID, l.WorkerHost, l.WorkerPID)
					}
					row(tw, task, orDash(l.Name), orDash(l.Queue), held, l.PID, orDash(l.ClientAddr), orDash(l.ApplicationName), worker)
				}
				tw.Flush()
			}
			fmt.Fprintln(w)
			if len(waits) == 0 {
				fmt.Fprintln(w, "No sessions are waiting for a lock.")
			} else {
				fmt.Fprintf(w, "Sessions waiting for a lock (%d):\n", len(waits))
				tw := table(w, "PID", "WAITING", "FOR", "BLOCKED BY", "CLIENT", "APPLICATION", "QUERY")
				for _, x := range waits {
					by := make([]string, len(x.BlockedBy))
					for i, p := range x.BlockedBy {
						by[i] = fmt.Sprint(p)
					}
					row(tw, x.PID, short(x.Waiting), orDash(x.WaitEvent), strings.Join(by, ","), orDash(x.ClientAddr),
						orDash(x.ApplicationName), clip(x.Query, 60))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			fmt.Fprintln(w)
			return printNamedLocks(w, named, leases)
		},
	})
}
