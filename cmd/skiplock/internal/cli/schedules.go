package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/queue"
)

func (a *app) schedulesCommand() *cobra.Command {
	c := newCommand(&cobra.Command{
		Use:     "schedules",
		Aliases: []string{"schedule"},
		Short:   "Add, change, pause, resume, remove and list periodic schedules stored in the database",
		Long: `A stored schedule enqueues a task on a cron expression (--cron) or a fixed
interval (--every), like a worker's Config.Periodic, but lives in the
database: running workers pick up a change within seconds, without a
restart, and each tick is enqueued once across every worker. A stored
schedule named as a configured schedule (worker.PeriodicTask's Name)
replaces it while it is stored. Cron expressions are in UTC unless they begin with CRON_TZ=Zone.`,
		Example: `  skiplock schedules add nightly-report --cron '0 3 * * *' --task report.build --queue reports
  skiplock schedules add heartbeat --every 30s --task ping --payload '{"target":"db"}'
  skiplock schedules set heartbeat --every 1m
  skiplock schedules pause heartbeat
  skiplock schedules resume heartbeat
  skiplock schedules list
  skiplock schedules remove heartbeat`,
		Args: unknownCommand,
		RunE: showHelp,
	})
	c.AddCommand(a.scheduleListCommand(), a.scheduleWriteCommand(true), a.scheduleWriteCommand(false),
		a.scheduleChangeCommand("pause"), a.scheduleChangeCommand("resume"), a.scheduleChangeCommand("remove"))
	return c
}

// scheduleError makes a refused change (bad input, a duplicate, an unknown
// schedule) a usage error: nothing was changed.
func scheduleError(err error) error {
	if errors.Is(err, queue.ErrInvalidRequest) || errors.Is(err, queue.ErrScheduleExists) || errors.Is(err, queue.ErrScheduleNotFound) {
		return usageErrorf("%s", message(err))
	}
	return err
}

// scheduleWriteCommand is add (add) or set.
func (a *app) scheduleWriteCommand(add bool) *cobra.Command {
	var (
		s       queue.Schedule
		payload string
	)
	use, short := "set NAME", "Change a stored schedule: only the flags given"
	example := "  skiplock schedules set heartbeat --every 1m\n  skiplock schedules set nightly-report --cron '30 2 * * *' --queue slow"
	if add {
		use, short = "add NAME", "Add a stored schedule"
		example = "  skiplock schedules add nightly-report --cron '0 3 * * *' --task report.build\n  skiplock schedules add heartbeat --every 30s --task ping --paused"
	}
	c := newCommand(&cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args:    exactArgs(1, "give the schedule's NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			if f.Changed("cron") && f.Changed("every") {
				return usageErrorf("give one of --cron and --every, not both")
			}
			if add && !f.Changed("cron") && !f.Changed("every") {
				return usageErrorf("give --cron or --every")
			}
			if add && s.Task == "" {
				return usageErrorf("give --task, the name of the task to enqueue at each tick")
			}
			if f.Changed("payload") {
				if err := checkJSON(json.RawMessage(payload)); err != nil {
					return usageErrorf("--payload is not valid JSON: %v", err)
				}
			}
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			want := s
			want.Name = args[0]
			if !add {
				cur, err := client.GetSchedule(cmd.Context(), args[0])
				if err != nil {
					return scheduleError(err)
				}
				// The flags given replace what is stored.
				want = cur
				switch {
				case f.Changed("cron"):
					want.Cron, want.Every = s.Cron, 0
				case f.Changed("every"):
					want.Cron, want.Every = "", s.Every
				}
				for flag, apply := range map[string]func(){
					"task": func() { want.Task = s.Task }, "queue": func() { want.Queue = s.Queue },
					"priority": func() { want.Priority = s.Priority }, "max-attempts": func() { want.MaxAttempts = s.MaxAttempts },
					"timeout": func() { want.Timeout = s.Timeout }, "catch-up": func() { want.CatchUp = s.CatchUp },
				} {
					if f.Changed(flag) {
						apply()
					}
				}
			}
			if f.Changed("payload") {
				want.Payload = json.RawMessage(payload)
			}
			if add {
				err = client.AddSchedule(cmd.Context(), want)
			} else {
				err = client.UpdateSchedule(cmd.Context(), want)
			}
			if err != nil {
				return scheduleError(err)
			}
			if a.json {
				return a.printJSON(map[string]any{"action": map[bool]string{true: "add", false: "set"}[add], "schedule": toScheduleJSON(want)})
			}
			verb := map[bool]string{true: "Added", false: "Changed"}[add]
			fmt.Fprintf(a.env.Stdout, "%s schedule %s: task %s %s.\n", verb, want.Name, want.Task, want.Spec())
			return nil
		},
	})
	fl := c.Flags()
	fl.StringVar(&s.Cron, "cron", "", "cron expression: 5 fields, 6 with seconds first, or @hourly...; UTC unless it begins with CRON_TZ=Zone")
	durationVar(fl, &s.Every, "every", 0, "fixed interval, at least 1s, aligned to the Unix epoch (e.g. 30s, 5m)")
	fl.StringVar(&s.Task, "task", "", "the name of the task enqueued at each tick")
	fl.StringVar(&payload, "payload", "", "the task's JSON payload (default null)")
	fl.StringVar(&s.Queue, "queue", "", "the task's queue (default \"default\")")
	fl.IntVar(&s.Priority, "priority", 0, "the task's priority; lower runs first")
	fl.IntVar(&s.MaxAttempts, "max-attempts", 0, "the task's attempts before it stays failed (default 25)")
	durationVar(fl, &s.Timeout, "timeout", 0, "bound on each attempt (default: the worker's)")
	fl.BoolVar(&s.CatchUp, "catch-up", false, "enqueue the latest tick missed while no worker ran (more than 10s late), once (default: skip missed ticks)")
	if add {
		fl.BoolVar(&s.Paused, "paused", false, "add it paused (resume it with `skiplock schedules resume`)")
	}
	return c
}

func (a *app) scheduleChangeCommand(verb string) *cobra.Command {
	short := map[string]string{
		"pause":  "Pause a stored schedule: its ticks pass, nothing is enqueued",
		"resume": "Resume a paused schedule, from its next tick",
		"remove": "Remove a stored schedule (the tasks it enqueued stay)",
	}[verb]
	return newCommand(&cobra.Command{
		Use:     verb + " NAME",
		Short:   short,
		Example: "  skiplock schedules " + verb + " heartbeat",
		Args:    exactArgs(1, "give the schedule's NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			name := args[0]
			change := map[string]func() error{
				"pause":  func() error { return client.PauseSchedule(cmd.Context(), name) },
				"resume": func() error { return client.ResumeSchedule(cmd.Context(), name) },
				"remove": func() error { return client.RemoveSchedule(cmd.Context(), name) },
			}[verb]
			if err := change(); err != nil {
				return scheduleError(err)
			}
			if a.json {
				return a.printJSON(map[string]any{"action": verb, "schedule": name})
			}
			fmt.Fprintf(a.env.Stdout, "%s schedule %s.\n", map[string]string{"pause": "Paused", "resume": "Resumed", "remove": "Removed"}[verb], name)
			return nil
		},
	})
}

// scheduleJSON is a stored schedule in --json output.
type scheduleJSON struct {
	Name        string          `json:"name"`
	Cron        string          `json:"cron,omitempty"`
	EveryMs     int64           `json:"every_ms,omitempty"`
	Task        string          `json:"task"`
	Payload     json.RawMessage `json:"payload"`
	Queue       string          `json:"queue,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	TimeoutMs   int64           `json:"timeout_ms,omitempty"`
	CatchUp     bool            `json:"catch_up"`
	Paused      bool            `json:"paused"`
	PausedAt    *time.Time      `json:"paused_at,omitempty"`
	LastTick    *time.Time      `json:"last_tick,omitempty"`
	UpdatedAt   time.Time       `json:"updated_at,omitzero"`
}

// lastTick is the schedule's last tick, or nil when it never ticked. For a
// new schedule the scheduler records the tick before it first saw it (the
// one the schedule starts after), which is not a tick it enqueued. Every
// tick it enqueues comes after the schedule was added, and running workers
// see a new schedule within seconds, so a recorded tick not after the
// schedule was added is that start. (A schedule added while no worker ran
// starts after the tick before a worker first saw it, and that tick is
// shown.)
func lastTick(s queue.Schedule) *time.Time {
	if s.LastTick == nil || !s.LastTick.After(s.CreatedAt) {
		return nil
	}
	return s.LastTick
}

func toScheduleJSON(s queue.Schedule) scheduleJSON {
	p := s.Payload
	if p == nil {
		p = json.RawMessage("null")
	}
	return scheduleJSON{
		Name: s.Name, Cron: s.Cron, EveryMs: s.Every.Milliseconds(), Task: s.Task, Payload: p, Queue: s.Queue,
		Priority: s.Priority, MaxAttempts: s.MaxAttempts, TimeoutMs: s.Timeout.Milliseconds(), CatchUp: s.CatchUp,
		Paused: s.Paused, PausedAt: s.PausedAt, LastTick: lastTick(s), UpdatedAt: s.UpdatedAt,
	}
}

func (a *app) scheduleListCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:     "list",
		Short:   "List the stored schedules and their last ticks",
		Example: "  skiplock schedules list\n  skiplock schedules list --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			schedules, err := client.Schedules(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				out := make([]scheduleJSON, len(schedules))
				for i, s := range schedules {
					out[i] = toScheduleJSON(s)
				}
				return a.printJSON(map[string]any{"schedules": out})
			}
			if len(schedules) == 0 {
				fmt.Fprintln(a.env.Stdout, "No stored schedules.")
				return nil
			}
			tw := table(a.env.Stdout, "NAME", "SCHEDULE", "TASK", "QUEUE", "STATE", "LAST TICK")
			for _, s := range schedules {
				q := s.Queue
				if q == "" {
					q = queue.DefaultQueue
				}
				state := "active"
				if s.Paused {
					state = "paused"
				}
				last := "never"
				if t := lastTick(s); t != nil {
					last = t.UTC().Format(time.RFC3339)
				}
				row(tw, s.Name, s.Spec(), s.Task, q, state, last)
			}
			return tw.Flush()
		},
	})
}
