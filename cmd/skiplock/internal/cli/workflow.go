package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/queue"
)

func (a *app) workflowCommand() *cobra.Command {
	c := newCommand(&cobra.Command{
		Use:   "workflow",
		Short: "Inspect workflows: tasks that wait for other tasks",
		Long: `A workflow is a group of tasks with dependencies between them (a DAG),
enqueued with queue.Client.EnqueueWorkflow or queue.WithDependsOn. A task
waits until every task it depends on has completed.`,
		Example: `  skiplock workflow show 7`,
		Args:    unknownCommand,
		RunE:    showHelp,
	})
	c.AddCommand(a.workflowShowCommand())
	return c
}

// workflowJSON is a workflow as --json prints it.
type workflowJSON struct {
	ID        int64              `json:"id"`
	Name      string             `json:"name"`
	CreatedAt time.Time          `json:"created_at"`
	Tasks     []workflowTaskJSON `json:"tasks"`
}

// workflowTaskJSON is one task of a workflow: its place in the DAG (level
// 0 depends on nothing in the workflow) and its status.
type workflowTaskJSON struct {
	ID         int64        `json:"id"`
	Step       string       `json:"step,omitempty"`
	Name       string       `json:"name"`
	Queue      string       `json:"queue"`
	Status     queue.Status `json:"status"`
	Level      int          `json:"level"`
	DependsOn  []int64      `json:"depends_on"`
	WaitingFor int          `json:"waiting_for"`
	Dependents []int64      `json:"dependents"`
	Why        string       `json:"why,omitempty"`
}

func (a *app) workflowShowCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:   "show ID",
		Short: "Show a workflow: its tasks level by level, what each waits for, their statuses",
		Long: `Show a workflow as a DAG: its tasks level by level (level 0 depends on
nothing, each other task comes one level after the deepest task it depends
on), each with its status and the tasks it depends on. A waiting task says
how many of them have not completed; a cancelled one, why.`,
		Example: `  skiplock workflow show 7
  skiplock workflow show 7 --json | jq '.tasks[] | select(.status == "failed")'`,
		Args: exactArgs(1, "workflow show needs one workflow ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			client, done, err := a.openFor(cmd.Context(), "workflow", ids[0])
			if err != nil {
				return err
			}
			defer done()
			wf, err := client.GetWorkflow(cmd.Context(), ids[0])
			if err != nil {
				return err
			}
			out := toWorkflowJSON(wf, time.Now())
			if a.json {
				return a.printJSON(out)
			}
			printWorkflow(a.env.Stdout, out)
			return nil
		},
	})
}

// toWorkflowJSON lays a workflow out level by level.
func toWorkflowJSON(wf *queue.WorkflowInfo, now time.Time) workflowJSON {
	out := workflowJSON{ID: wf.ID, Name: wf.Name, CreatedAt: wf.CreatedAt, Tasks: []workflowTaskJSON{}}
	for level, tasks := range wf.Levels() {
		for _, t := range tasks {
			why := t.Why(now)
			if t.Status == queue.StatusCancelled && len(t.Errors) > 0 {
				why = t.Errors[len(t.Errors)-1].Error
			}
			out.Tasks = append(out.Tasks, workflowTaskJSON{
				ID: t.ID, Step: wf.Steps[t.ID], Name: t.Name, Queue: t.Queue, Status: t.Status,
				Level: level, DependsOn: orEmpty(t.DependsOn), WaitingFor: t.WaitingFor,
				Dependents: orEmpty(t.Dependents), Why: why,
			})
		}
	}
	return out
}

func orEmpty(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}

func printWorkflow(w io.Writer, wf workflowJSON) {
	title := fmt.Sprintf("Workflow %d", wf.ID)
	if wf.Name != "" {
		title += " " + wf.Name
	}
	fmt.Fprintf(w, "%s, created %s (%s ago)\n", title, stamp(wf.CreatedAt), ago(wf.CreatedAt))
	counts := map[queue.Status]int{}
	label := map[int64]string{}
	for _, t := range wf.Tasks {
		counts[t.Status]++
		label[t.ID] = t.Step
		if t.Step == "" {
			label[t.ID] = "#" + strconv.FormatInt(t.ID, 10)
		}
	}
	var parts []string
	for _, st := range queue.Statuses {
		if counts[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
		}
	}
	fmt.Fprintf(w, "  %s: %s\n\n", plural(int64(len(wf.Tasks)), "task", "tasks"), strings.Join(parts, ", "))

	tw := table(w, "  LEVEL", "STEP", "TASK", "NAME", "STATUS", "DEPENDS ON")
	for _, t := range wf.Tasks {
		deps := make([]string, len(t.DependsOn))
		for i, d := range t.DependsOn {
			if l, ok := label[d]; ok {
				deps[i] = l
			} else {
				deps[i] = "#" + strconv.FormatInt(d, 10) + " (outside)"
			}
		}
		on := "-"
		if len(deps) > 0 {
			on = strings.Join(deps, ", ")
			if t.Status == queue.StatusWaiting {
				on += fmt.Sprintf(" (%d left)", t.WaitingFor)
			}
		}
		step := t.Step
		if step == "" {
			step = "-"
		}
		row(tw, fmt.Sprintf("  %d", t.Level), step, t.ID, t.Name, string(t.Status), on)
	}
	tw.Flush()
	for _, t := range wf.Tasks {
		if t.Status == queue.StatusCancelled || t.Status == queue.StatusFailed {
			if t.Why != "" {
				fmt.Fprintf(w, "  %s %s: %s\n", label[t.ID], t.Status, clip(t.Why, 200))
			}
		}
	}
}
