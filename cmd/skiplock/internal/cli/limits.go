package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

func (a *app) limitCommand() *cobra.Command {
	c := newCommand(&cobra.Command{
		Use:   "limit",
		Short: "Set, remove and list cluster-wide concurrency limits",
		Long: `A concurrency limit lets at most N tasks of a queue, of a task name, or of
each limit key matching a pattern (queue.WithLimitKey) run at once, across
every worker on every machine. Tasks over a limit stay pending. Workers
apply a change from their next claim.`,
		Example: `  skiplock limit set --queue reports --max 2
  skiplock limit set --name crm.push --max 10
  skiplock limit set --key 'tenant:*' --max 5     # at most 5 per tenant
  skiplock limit list
  skiplock limit remove --queue reports`,
		Args: unknownCommand,
		RunE: showHelp,
	})
	c.AddCommand(a.limitSetCommand(true), a.limitSetCommand(false), a.limitListCommand())
	return c
}

func (a *app) limitSetCommand(set bool) *cobra.Command {
	var l queue.Limit
	use, short := "remove", "Remove a limit"
	if set {
		use, short = "set", "Set a limit, or change its --max"
	}
	c := newCommand(&cobra.Command{
		Use:     use,
		Short:   short,
		Example: "  skiplock limit " + use + " --queue reports" + map[bool]string{true: " --max 2"}[set],
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := 0
			for _, s := range []string{l.Queue, l.Name, l.Key} {
				if s != "" {
					n++
				}
			}
			if n != 1 {
				return usageErrorf("give exactly one of --queue, --name and --key")
			}
			if set && l.Max < 1 {
				return usageErrorf("--max must be at least 1, got %d", l.Max)
			}
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if set {
				if err := client.SetLimit(cmd.Context(), l); err != nil {
					return err
				}
				if a.json {
					return a.printJSON(map[string]any{"action": "set", "limit": l.String(), "max": l.Max})
				}
				fmt.Fprintf(a.env.Stdout, "Limit %s: at most %d running.\n", l, l.Max)
				return nil
			}
			err = client.RemoveLimit(cmd.Context(), l)
			removed := !errors.Is(err, queue.ErrLimitNotFound)
			if err != nil && removed {
				return err
			}
			if a.json {
				return a.printJSON(map[string]any{"action": "remove", "limit": l.String(), "removed": removed})
			}
			if !removed {
				return usageErrorf("no limit %s (nothing was changed)", l)
			}
			fmt.Fprintf(a.env.Stdout, "Removed limit %s.\n", l)
			return nil
		},
	})
	c.Flags().StringVar(&l.Queue, "queue", "", "limit the tasks of this queue")
	c.Flags().StringVar(&l.Name, "name", "", "limit the tasks of this task name, in any queue")
	c.Flags().StringVar(&l.Key, "key", "", "limit each limit key matching this pattern ('*' matches anything)")
	if set {
		c.Flags().IntVar(&l.Max, "max", 0, "how many may run at once, across every worker")
	}
	return c
}

// limitJSON is a limit in --json output.
type limitJSON struct {
	Kind      string    `json:"kind"`
	Target    string    `json:"target"`
	Max       int       `json:"max"`
	Running   int       `json:"running"`
	Busiest   int       `json:"busiest_key,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

func toLimitJSON(l queue.Limit) limitJSON {
	out := limitJSON{Max: l.Max, Running: l.Running, UpdatedAt: l.UpdatedAt}
	switch {
	case l.Queue != "":
		out.Kind, out.Target = "queue", l.Queue
	case l.Name != "":
		out.Kind, out.Target = "name", l.Name
	default:
		out.Kind, out.Target, out.Busiest = "key", l.Key, l.Busiest
	}
	return out
}

func (a *app) limitListCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:   "list",
		Short: "List the limits and how many of their tasks run now, and the per-key rate limits' open windows",
		Long: `Lists the concurrency limits with how many of their tasks run now, then the
per-key rate limits (the workers' Config.RateLimits with PerKey) that have a
window open: how many keys have one, what those windows have taken, and the
busiest keys.`,
		Example: "  skiplock limit list\n  skiplock limit list --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			limits, err := client.Limits(cmd.Context())
			if err != nil {
				return err
			}
			keyed, err := ops.RateKeys(cmd.Context(), client)
			if err != nil {
				return err
			}
			if a.json {
				out := make([]limitJSON, len(limits))
				for i, l := range limits {
					out[i] = toLimitJSON(l)
				}
				rates := make([]rateKeysJSON, len(keyed))
				for i, k := range keyed {
					rates[i] = toRateKeysJSON(k)
				}
				return a.printJSON(map[string]any{"limits": out, "rate_keys": rates})
			}
			if err := a.printLimits(limits, true); err != nil {
				return err
			}
			return a.printRateKeys(keyed)
		},
	})
}

// rateKeysJSON is a per-key rate limit's open windows in --json output.
type rateKeysJSON struct {
	Limit       string       `json:"limit"`
	Keys        int          `json:"keys"`
	Used        int          `json:"used"`
	WindowStart time.Time    `json:"window_start"`
	Busiest     []keyUseJSON `json:"busiest"`
}

type keyUseJSON struct {
	Key  string `json:"key"`
	Used int    `json:"used"`
}

func toRateKeysJSON(k ops.RateKeyUsage) rateKeysJSON {
	out := rateKeysJSON{Limit: k.Limit, Keys: k.Keys, Used: k.Used, WindowStart: k.WindowStart, Busiest: []keyUseJSON{}}
	for _, b := range k.Busiest {
		out.Busiest = append(out.Busiest, keyUseJSON{Key: b.Key, Used: b.Used})
	}
	return out
}

// printRateKeys prints the per-key rate limits with a window open, after a
// blank line; nothing when there are none.
func (a *app) printRateKeys(keyed []ops.RateKeyUsage) error {
	if len(keyed) == 0 {
		return nil
	}
	fmt.Fprintln(a.env.Stdout, "\nPer-key rate limits (windows open now):")
	tw := table(a.env.Stdout, "RATE LIMIT", "WINDOW STARTED", "KEYS", "USED", "BUSIEST KEYS")
	for _, k := range keyed {
		var busiest []string
		for _, b := range k.Busiest {
			key := b.Key
			if key == "" {
				key = "(no key)"
			}
			busiest = append(busiest, fmt.Sprintf("%s=%d", key, b.Used))
		}
		row(tw, k.Limit, ago(k.WindowStart), k.Keys, k.Used, strings.Join(busiest, " "))
	}
	return tw.Flush()
}

// printLimits prints limits as a table (none: a line saying so, when
// sayNone) or, with --json, as {"limits": [...]}.
func (a *app) printLimits(limits []queue.Limit, sayNone bool) error {
	if a.json {
		out := make([]limitJSON, len(limits))
		for i, l := range limits {
			out[i] = toLimitJSON(l)
		}
		return a.printJSON(map[string]any{"limits": out})
	}
	if len(limits) == 0 {
		if sayNone {
			fmt.Fprintln(a.env.Stdout, "No concurrency limits.")
		}
		return nil
	}
	tw := table(a.env.Stdout, "LIMIT", "MAX", "RUNNING", "BUSIEST KEY")
	for _, l := range limits {
		j := toLimitJSON(l)
		busiest := "-"
		if j.Kind == "key" {
			busiest = fmt.Sprint(l.Busiest)
		}
		row(tw, l.String(), fmt.Sprint(l.Max), fmt.Sprint(l.Running), busiest)
	}
	return tw.Flush()
}
