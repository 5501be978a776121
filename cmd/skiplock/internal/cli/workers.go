package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/ops"
)

// workerJSON is a worker process in --json output.
type workerJSON struct {
	ID     string   `json:"id"`
	Host   string   `json:"host"`
	PID    int      `json:"pid"`
	Queues []string `json:"queues"`
	// Names is null for a worker that predates the record: it handles every name.
	Names            []string  `json:"names"`
	StartedAt        time.Time `json:"started_at"`
	HeartbeatAt      time.Time `json:"heartbeat_at"`
	HeartbeatSeconds float64   `json:"heartbeat_seconds"`
	LockBackendPID   int       `json:"lock_backend_pid,omitempty"`
	Connected        bool      `json:"connected"`
	Running          int64     `json:"running"`
	Gone             bool      `json:"gone"`
}

func (a *app) workersCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:   "workers",
		Short: "List the worker processes: live ones first, what they claim, what they run",
		Long: fmt.Sprintf(`List the worker processes registered in the database, live ones first and
then by latest heartbeat: the host and pid, the queues each claims from, the
task names it has handlers for, how many tasks it runs now, the PostgreSQL
backend of its lock session (none in lease mode) and its last heartbeat.

A worker is gone when its heartbeat is older than %s (it renews it every
10s) or its lock session has disconnected; gone workers are left out %s
after their last heartbeat, and counted at the end.`, short(ops.WorkerGoneAfter), short(ops.WorkerForgetAfter)),
		Example: `  skiplock workers
  skiplock workers --json | jq '.workers[] | select(.gone | not) | .host'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			workers, forgotten, err := ops.Workers(cmd.Context(), client)
			if err != nil {
				return err
			}
			if a.json {
				out := struct {
					Workers   []workerJSON `json:"workers"`
					Forgotten int          `json:"forgotten"`
				}{Workers: make([]workerJSON, len(workers)), Forgotten: forgotten}
				for i, w := range workers {
					out.Workers[i] = workerJSON{
						ID: w.ID, Host: w.Host, PID: w.PID, Queues: w.Queues, Names: w.Names, StartedAt: w.StartedAt,
						HeartbeatAt: w.HeartbeatAt, HeartbeatSeconds: time.Since(w.HeartbeatAt).Seconds(),
						LockBackendPID: w.LockBackendPID, Connected: w.Connected, Running: w.Running, Gone: w.Gone,
					}
				}
				return a.printJSON(out)
			}
			out := a.env.Stdout
			if len(workers) == 0 {
				fmt.Fprintln(out, "No workers are registered.")
			} else {
				tw := table(out, "ID", "HOST", "PID", "STATE", "QUEUES", "NAMES", "RUNNING", "LOCK SESSION", "HEARTBEAT")
				for _, w := range workers {
					state := "live"
					if w.Gone {
						state = "gone"
					}
					names := "(every name)"
					if w.Names != nil {
						names = clip(strings.Join(w.Names, ","), 40)
					}
					session := "- (lease mode)"
					if w.LockBackendPID != 0 {
						session = fmt.Sprint(w.LockBackendPID)
						if !w.Connected {
							session += " (disconnected)"
						}
					}
					row(tw, w.ID, w.Host, w.PID, state, strings.Join(w.Queues, ","), names, w.Running, session, ago(w.HeartbeatAt)+" ago")
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if forgotten > 0 {
				fmt.Fprintf(out, "(%s gone over %s ago not listed)\n", plural(int64(forgotten), "worker", "workers"), short(ops.WorkerForgetAfter))
			}
			return nil
		},
	})
}
