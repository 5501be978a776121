package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/queue"
)

func (a *app) batchCommand() *cobra.Command {
	c := newCommand(&cobra.Command{
		Use:     "batch",
		Aliases: []string{"batches"},
		Short:   "Inspect batches: tasks enqueued together, with callbacks when they finish",
		Long: `A batch is a group of tasks enqueued together with queue.Client.EnqueueBatch,
with up to two callback tasks: OnFinish runs once every member has finished
(completed, failed for good or cancelled), OnSuccess only if every member
completed. A batch keeps the counts of its members by outcome.`,
		Example: `  skiplock batch list --state running
  skiplock batch show 12`,
		Args: unknownCommand,
		RunE: showHelp,
	})
	c.AddCommand(a.batchListCommand(), a.batchShowCommand())
	return c
}

// batchJSON is a batch as --json prints it.
type batchJSON struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	// State is running (some member has not finished) or finished.
	State           string     `json:"state"`
	Total           int        `json:"total"`
	Completed       int        `json:"completed"`
	Failed          int        `json:"failed"`
	Cancelled       int        `json:"cancelled"`
	Unfinished      int        `json:"unfinished"`
	OnFinishTaskID  int64      `json:"on_finish_task_id,omitempty"`
	OnSuccessTaskID int64      `json:"on_success_task_id,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
	FinishedAt      *time.Time `json:"finished_at"`
	// Tasks are the batch's tasks still stored (show only).
	Tasks []batchTaskJSON `json:"tasks,omitempty"`
}

// batchTaskJSON is one task of a batch: a member, on_finish or on_success.
type batchTaskJSON struct {
	ID     int64        `json:"id"`
	Role   string       `json:"role"`
	Name   string       `json:"name"`
	Queue  string       `json:"queue"`
	Status queue.Status `json:"status"`
	Why    string       `json:"why,omitempty"`
}

func toBatchJSON(b *queue.BatchInfo) batchJSON {
	state := "running"
	if b.Finished() {
		state = "finished"
	}
	return batchJSON{
		ID: b.ID, Name: b.Name, State: state, Total: b.Total, Completed: b.Completed, Failed: b.Failed, Cancelled: b.Cancelled,
		Unfinished: b.Unfinished(), OnFinishTaskID: b.OnFinishTaskID, OnSuccessTaskID: b.OnSuccessTaskID,
		CreatedAt: b.CreatedAt, FinishedAt: b.FinishedAt,
	}
}

// callbackLabel describes a callback task id of a batch for people.
func callbackLabel(id int64) string {
	if id == 0 {
		return "-"
	}
	return fmt.Sprintf("#%d", id)
}

func (a *app) batchListCommand() *cobra.Command {
	var state string
	var beforeID int64
	var limit countFlag
	c := newCommand(&cobra.Command{
		Use:   "list",
		Short: "List batches, newest first, with their counts",
		Example: `  skiplock batch list
  skiplock batch list --state running --limit 20
  skiplock batch list --json | jq '.[] | select(.failed > 0)'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			batches, err := client.ListBatches(cmd.Context(), queue.BatchFilter{State: state, BeforeID: beforeID, Limit: int(limit)})
			if err != nil {
				return err
			}
			if a.json {
				out := make([]batchJSON, len(batches))
				for i, b := range batches {
					out[i] = toBatchJSON(b)
				}
				return a.printJSON(out)
			}
			if len(batches) == 0 {
				fmt.Fprintln(a.env.Stdout, "No batch matches.")
				return nil
			}
			tw := table(a.env.Stdout, "ID", "NAME", "STATE", "TOTAL", "COMPLETED", "FAILED", "CANCELLED", "ON FINISH", "ON SUCCESS", "CREATED")
			for _, b := range batches {
				j := toBatchJSON(b)
				row(tw, b.ID, orDash(b.Name), j.State, b.Total, b.Completed, b.Failed, b.Cancelled,
					callbackLabel(b.OnFinishTaskID), callbackLabel(b.OnSuccessTaskID), ago(b.CreatedAt)+" ago")
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(batches) == int(limit) {
				fmt.Fprintf(a.env.Stdout, "(newest %d; more with --before %d or --limit)\n", limit, batches[len(batches)-1].ID)
			}
			return nil
		},
	})
	fl := c.Flags()
	fl.StringVar(&state, "state", "", "only batches in this state: running (some member has not finished) or finished")
	limit.register(c, "limit", 50, "at most this many batches")
	fl.Int64Var(&beforeID, "before", 0, "only batches with an ID below this one (the next page)")
	return c
}

func (a *app) batchShowCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:   "show ID",
		Short: "Show a batch: its counts, callbacks and tasks",
		Long: `Show a batch: how many of its members completed, failed for good, were
cancelled or have not finished, its callbacks and their statuses, and its
tasks still stored (tasks past their retention are gone from the list but
still counted).`,
		Example: `  skiplock batch show 12
  skiplock batch show 12 --json | jq '.tasks[] | select(.status == "failed")'`,
		Args: exactArgs(1, "batch show needs one batch ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			client, done, err := a.openFor(cmd.Context(), "batch", ids[0])
			if err != nil {
				return err
			}
			defer done()
			b, err := client.GetBatch(cmd.Context(), ids[0])
			if err != nil {
				return err
			}
			tasks, err := client.BatchTasks(cmd.Context(), ids[0])
			if err != nil {
				return err
			}
			out := toBatchJSON(b)
			now := time.Now()
			out.Tasks = []batchTaskJSON{}
			for _, t := range tasks {
				role := "member"
				switch t.ID {
				case b.OnFinishTaskID:
					role = "on_finish"
				case b.OnSuccessTaskID:
					role = "on_success"
				}
				why := t.Why(now)
				if (t.Status == queue.StatusCancelled || t.Status == queue.StatusFailed) && len(t.Errors) > 0 {
					why = t.Errors[len(t.Errors)-1].Error
				}
				out.Tasks = append(out.Tasks, batchTaskJSON{ID: t.ID, Role: role, Name: t.Name, Queue: t.Queue,
					Status: t.Status, Why: why})
			}
			if a.json {
				return a.printJSON(out)
			}
			printBatch(a.env.Stdout, out)
			return nil
		},
	})
}

func printBatch(w io.Writer, b batchJSON) {
	title := fmt.Sprintf("Batch %d", b.ID)
	if b.Name != "" {
		title += " " + b.Name
	}
	fmt.Fprintf(w, "%s, created %s (%s ago), %s\n", title, stamp(b.CreatedAt), ago(b.CreatedAt), b.State)
	fmt.Fprintf(w, "  %s: %d completed, %d failed, %d cancelled, %d not finished\n",
		plural(int64(b.Total), "member", "members"), b.Completed, b.Failed, b.Cancelled, b.Unfinished)
	if b.FinishedAt != nil {
		fmt.Fprintf(w, "  Finished: %s (%s ago)\n", stamp(*b.FinishedAt), ago(*b.FinishedAt))
	}
	fmt.Fprintln(w)
	tw := table(w, "  ROLE", "TASK", "NAME", "QUEUE", "STATUS", "WHY")
	for _, t := range b.Tasks {
		row(tw, "  "+t.Role, t.ID, t.Name, t.Queue, string(t.Status), orDash(clip(t.Why, 80)))
	}
	tw.Flush()
	if gone := b.Total + countCallbacks(b) - len(b.Tasks); gone > 0 {
		fmt.Fprintf(w, "  (%s gone: past their retention or deleted)\n", plural(int64(gone), "task", "tasks"))
	}
}

func countCallbacks(b batchJSON) int {
	n := 0
	if b.OnFinishTaskID != 0 {
		n++
	}
	if b.OnSuccessTaskID != 0 {
		n++
	}
	return n
}
