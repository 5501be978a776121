package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

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
	use, short, past := "resume QUEUE...", "Let workers claim tasks of the queues again", "Resumed"
	if pause {
		use, short, past = "pause QUEUE...", "Stop workers from claiming tasks of the queues", "Paused"
	}
	return newCommand(&cobra.Command{
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
}

func (a *app) queueListCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:     "list",
		Short:   "List queues with tasks, and whether they are paused",
		Example: "  skiplock queue list --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			stats, err := client.Stats(cmd.Context())
			if err != nil {
				return err
			}
			paused, err := client.PausedQueues(cmd.Context())
			if err != nil {
				return err
			}
			pausedAt := map[string]time.Time{}
			for _, p := range paused {
				pausedAt[p.Name] = p.PausedAt
			}
			type queueJSON struct {
				Name     string     `json:"name"`
				Pending  int64      `json:"pending"`
				Running  int64      `json:"running"`
				PausedAt *time.Time `json:"paused_at"`
			}
			var out []queueJSON
			seen := map[string]bool{}
			for _, q := range stats.Queues {
				seen[q.Queue] = true
				j := queueJSON{Name: q.Queue, Pending: q.Pending, Running: q.Running}
				if at, ok := pausedAt[q.Queue]; ok {
					j.PausedAt = &at
				}
				out = append(out, j)
			}
			for _, p := range paused { // paused queues with no tasks yet
				if !seen[p.Name] {
					at := p.PausedAt
					out = append(out, queueJSON{Name: p.Name, PausedAt: &at})
				}
			}
			if a.json {
				return a.printJSON(map[string]any{"queues": out})
			}
			tw := table(a.env.Stdout, "QUEUE", "PENDING", "RUNNING", "STATE")
			for _, q := range out {
				state := "active"
				if q.PausedAt != nil {
					state = "paused since " + q.PausedAt.Local().Format(time.DateTime)
				}
				row(tw, q.Name, count(q.Pending), count(q.Running), state)
			}
			return tw.Flush()
		},
	})
}
