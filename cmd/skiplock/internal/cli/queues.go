package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

func (a *app) queueCommand() *cobra.Command {
	c := newCommand(&cobra.Command{
		Use:   "queue",
		Short: "Pause, resume and list queues",
		Long: `Pause a queue to stop every worker from claiming its tasks (from their next
claim on; running tasks finish), and resume it to let them claim again.`,
		Example: `  skiplock queue pause reports
  skiplock queue list
  skiplock queue resume reports`,
		Args: unknownCommand,
		RunE: showHelp,
	})
	c.AddCommand(a.queuePauseCommand(true), a.queuePauseCommand(false), a.queueListCommand())
	return c
}

func (a *app) queuePauseCommand(pause bool) *cobra.Command {
	var create bool
	use, short, past := "resume QUEUE...", "Let workers claim tasks of the queues again", "Resumed"
	if pause {
		use, short, past = "pause QUEUE...", "Stop workers from claiming tasks of the queues", "Paused"
	}
	c := newCommand(&cobra.Command{
		Use:     use,
		Short:   short,
		Example: "  skiplock queue " + use[:len(use)-len(" QUEUE...")] + " reports mail",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("name at least one queue")
			}
			for _, q := range args {
				if q == "" || len(q) > queue.MaxNameLength {
					return usageErrorf("%q is not a queue name (1 to %d bytes)", q, queue.MaxNameLength)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			// A typo must not pause a queue nobody uses: check every name
			// before changing any.
			if !create {
				for _, q := range args {
					known, err := ops.QueueExists(cmd.Context(), client, q)
					if err != nil {
						return err
					}
					if known {
						continue
					}
					if pause {
						return usageErrorf("no queue %q: it has no tasks and was never paused; check the name, "+
							"or pass --create to pause it before its first task (nothing was paused)", q)
					}
					return usageErrorf("no queue %q: it has no tasks and was never paused, so there is nothing to resume (nothing was changed)", q)
				}
			}
			for _, q := range args {
				if pause {
					err = client.PauseQueue(cmd.Context(), q)
				} else {
					err = client.ResumeQueue(cmd.Context(), q)
				}
				if err != nil {
					return err
				}
			}
			if a.json {
				return a.printJSON(map[string]any{"action": map[bool]string{true: "pause", false: "resume"}[pause], "queues": args})
			}
			for _, q := range args {
				fmt.Fprintf(a.env.Stdout, "%s queue %s.\n", past, q)
			}
			return nil
		},
	})
	if pause {
		c.Flags().BoolVar(&create, "create", false, "pause a queue that has no tasks yet (else an unknown name is refused)")
	}
	return c
}

func (a *app) queueListCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:   "list",
		Short: "List the queues: backlog, running and failed tasks, paused or not",
		Long: `List every known queue (one with tasks in any status, or paused once): its
due, retrying and scheduled tasks, running and failed tasks, and whether it
is paused, since when.`,
		Example: "  skiplock queue list\n  skiplock queue list --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			queues, err := ops.Queues(cmd.Context(), client)
			if err != nil {
				return err
			}
			type queueJSON struct {
				Name      string     `json:"name"`
				Pending   int64      `json:"pending"`
				Due       int64      `json:"due"`
				Retrying  int64      `json:"retrying"`
				Scheduled int64      `json:"scheduled"`
				Running   int64      `json:"running"`
				Failed    int64      `json:"failed"`
				PausedAt  *time.Time `json:"paused_at"`
			}
			out := make([]queueJSON, len(queues))
			for i, q := range queues {
				out[i] = queueJSON{Name: q.Name, Pending: q.Pending, Due: q.Due, Retrying: q.Retrying, Scheduled: q.Scheduled,
					Running: q.Running, Failed: q.Failed, PausedAt: q.PausedAt}
			}
			if a.json {
				return a.printJSON(map[string]any{"queues": out})
			}
			if len(out) == 0 {
				fmt.Fprintln(a.env.Stdout, "No queues: no tasks have been enqueued.")
				return nil
			}
			tw := table(a.env.Stdout, "QUEUE", "DUE", "RETRYING", "SCHEDULED", "RUNNING", "FAILED", "STATE")
			for _, q := range out {
				state := "active"
				if q.PausedAt != nil {
					state = "paused since " + stamp(*q.PausedAt)
				}
				row(tw, q.Name, count(q.Due), count(q.Retrying), count(q.Scheduled), count(q.Running), count(q.Failed), state)
			}
			return tw.Flush()
		},
	})
}
