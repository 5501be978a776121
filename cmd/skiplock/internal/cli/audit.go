package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/defaults"
	"github.com/skiplock/skiplock/queue"
)

// osUser is who the audit trail records for the command's changes: the OS
// user running it (the database role is recorded too).
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// auditJSON is an audit record as `skiplock audit --json` prints it.
type auditJSON struct {
	ID         int64             `json:"id"`
	At         time.Time         `json:"at"`
	Actor      string            `json:"actor"`
	DBRole     string            `json:"db_role"`
	Source     queue.Source      `json:"source"`
	Action     queue.AuditAction `json:"action"`
	Request    json.RawMessage   `json:"request"`
	Affected   int64             `json:"affected"`
	FinishedAt *time.Time        `json:"finished_at"`
	Error      string            `json:"error,omitempty"`
}

func (a *app) auditCommand() *cobra.Command {
	var (
		since, action, actor, source string
		limit                        countFlag
		beforeID                     int64
	)
	c := newCommand(&cobra.Command{
		Use:   "audit",
		Short: "List the audit trail: who changed what, when, and how many tasks",
		Long: `List the operator changes recorded in the audit trail, newest first: every
requeue, cancel, delete, purge, run now, pause, resume, limit set or
removed, schedule added, changed, paused, resumed or removed, and task
enqueued by hand, made with this command (source cli, as
the OS user running it), the dashboard (source dashboard, as the user its
application named), or a program through package queue (source api). Each
record has who, the database role, when, what was asked (the task IDs or
the filter) and how many tasks it changed; a batched change (a requeue of
a filter, a purge) that stopped on an error has that error, and one still
running or interrupted is marked unfinished.

Workers delete records older than worker.Config.RetainAudit (90 days by
default).`,
		Example: `  skiplock audit
  skiplock audit --since 24h --action requeue
  skiplock audit --actor alice --limit 200
  skiplock audit --since 7d --json | jq '.[] | select(.affected > 1000)'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			from, err := parseSince("since", since, time.Now())
			if err != nil {
				return err
			}
			if action != "" && !slices.Contains(queue.AuditActions, queue.AuditAction(action)) {
				return usageErrorf("unknown --action %q; want one of %s", action, auditActionNames())
			}
			if source != "" && !slices.Contains([]queue.Source{queue.SourceCLI, queue.SourceDashboard, queue.SourceAPI}, queue.Source(source)) {
				return usageErrorf("unknown --source %q; want cli, dashboard or api", source)
			}
			if beforeID < 0 {
				return usageErrorf("--before must be a record ID, got %d", beforeID)
			}
			f := queue.AuditFilter{Since: from, Action: queue.AuditAction(action), Actor: actor, Source: queue.Source(source),
				BeforeID: beforeID, Limit: int(limit)}
			if err := invalidInput(f.Validate()); err != nil {
				return err
			}
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			records, err := client.AuditLog(cmd.Context(), f)
			if err != nil {
				return err
			}
			if a.json {
				out := make([]auditJSON, len(records))
				for i, r := range records {
					out[i] = auditJSON{ID: r.ID, At: r.At, Actor: r.Actor, DBRole: r.DBRole, Source: r.Source, Action: r.Action,
						Request: r.Request, Affected: r.Affected, FinishedAt: r.FinishedAt, Error: r.Error}
				}
				return a.printJSON(out)
			}
			if len(records) == 0 {
				fmt.Fprintln(a.env.Stdout, "No operator change recorded matches.")
				return nil
			}
			tw := table(a.env.Stdout, "ID", "WHEN", "ACTOR", "SOURCE", "ROLE", "ACTION", "TASKS", "REQUEST", "ERROR")
			for _, r := range records {
				affected := count(r.Affected)
				if r.FinishedAt == nil {
					affected += " (unfinished)"
				}
				row(tw, r.ID, stamp(r.At), orDash(r.Actor), r.Source, r.DBRole, r.Action, affected, clip(compactJSON(r.Request), 80), orDash(clip(r.Error, 60)))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(records) == int(limit) {
				fmt.Fprintf(a.env.Stdout, "(newest %d; more with --before %d or --limit)\n", limit, records[len(records)-1].ID)
			}
			return nil
		},
	})
	fl := c.Flags()
	fl.StringVar(&since, "since", "", "only changes made since then: a duration ago (24h, 7d) or a time (2026-01-02T15:04:05Z)")
	fl.StringVar(&action, "action", "", "only this action: "+auditActionNames())
	fl.StringVar(&actor, "actor", "", "only changes made by this actor")
	fl.StringVar(&source, "source", "", "only changes from this source: cli, dashboard or api")
	limit.register(c, "limit", defaults.AuditLimit, "at most this many records")
	fl.Int64Var(&beforeID, "before", 0, "only records with an ID below this one (the next page)")
	return c
}

// auditActionNames lists every action the audit trail records, from
// queue.AuditActions, the one list.
func auditActionNames() string {
	names := make([]string, len(queue.AuditActions))
	for i, a := range queue.AuditActions {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

// compactJSON is raw on one line, without spaces.
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
