package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/queue"
)

func (a *app) sequenceCommand() *cobra.Command {
	c := newCommand(&cobra.Command{
		Use:   "sequence",
		Short: "Inspect sequences: tasks that run one at a time, in order, per key",
		Long: `A sequence is the tasks enqueued with one sequence key (queue.WithSequence):
they run one at a time, in the order they were enqueued, across every
worker. The task at the head runs; the others wait their turn.`,
		Example: `  skiplock sequence show account:42`,
		Args:    unknownCommand,
		RunE:    showHelp,
	})
	c.AddCommand(a.sequenceShowCommand())
	return c
}

// sequenceJSON is a sequence as --json prints it.
type sequenceJSON struct {
	Key string `json:"key"`
	// Head is the task that runs now or next; 0 when none is left to run.
	Head   int64                  `json:"head"`
	Counts map[queue.Status]int64 `json:"counts"`
	// Tasks in order: the unfinished ones, then the latest finished ones
	// (see queue.SequenceInfo).
	Tasks []sequenceTaskJSON `json:"tasks"`
}

type sequenceTaskJSON struct {
	ID     int64        `json:"id"`
	Name   string       `json:"name"`
	Queue  string       `json:"queue"`
	Status queue.Status `json:"status"`
	Head   bool         `json:"head,omitempty"`
	// Hold: a failure for good holds the rest (queue.WithSequenceHold).
	Hold      bool      `json:"hold,omitempty"`
	Attempt   int       `json:"attempt"`
	CreatedAt time.Time `json:"created_at"`
	Why       string    `json:"why,omitempty"`
}

func (a *app) sequenceShowCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:   "show KEY",
		Short: "Show a sequence: its tasks in order, which one is the head, their statuses",
		Long: `Show the tasks of the sequence KEY in the order they run: the unfinished
ones (pending, running, waiting, failed) from the first, up to 1,000, then
the latest 100 finished ones, and how many tasks of the key are in each
status. The head is the task that runs now or next: pending or running, or
failed and holding the rest (until it is requeued or cancelled).`,
		Example: `  skiplock sequence show account:42
  skiplock sequence show account:42 --json | jq '.tasks[] | select(.head)'`,
		Args: exactArgs(1, "sequence show needs one sequence key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "" || len(args[0]) > queue.MaxKeyLength {
				return usageErrorf("a sequence key is 1 to %d bytes, got %d", queue.MaxKeyLength, len(args[0]))
			}
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			seq, err := client.GetSequence(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			out := toSequenceJSON(seq, time.Now())
			if a.json {
				return a.printJSON(out)
			}
			total, summary := seq.Summary()
			printSequence(a.env.Stdout, out, total, summary)
			return nil
		},
	})
}

func toSequenceJSON(seq *queue.SequenceInfo, now time.Time) sequenceJSON {
	out := sequenceJSON{Key: seq.Key, Head: seq.Head, Counts: seq.Counts, Tasks: []sequenceTaskJSON{}}
	for _, t := range seq.Tasks {
		why := t.Why(now)
		if t.Status == queue.StatusFailed || t.Status == queue.StatusCancelled {
			if e := t.LastError(); e != "" {
				why = e
			}
		}
		out.Tasks = append(out.Tasks, sequenceTaskJSON{
			ID: t.ID, Name: t.Name, Queue: t.Queue, Status: t.Status, Head: t.ID == seq.Head,
			Hold: t.SequenceHold, Attempt: t.Attempt, CreatedAt: t.CreatedAt, Why: why,
		})
	}
	return out
}

func printSequence(w io.Writer, seq sequenceJSON, total int64, summary string) {
	fmt.Fprintf(w, "Sequence %q: %s: %s\n", seq.Key, plural(total, "task", "tasks"), summary)
	switch head := seq.head(); {
	case head == nil:
		fmt.Fprintln(w, "  Nothing left to run.")
	case head.Status == queue.StatusFailed:
		fmt.Fprintf(w, "  Held by task %d, failed: requeue it (skiplock requeue %d) or cancel it (skiplock cancel %d) to go on.\n", head.ID, head.ID, head.ID)
	case head.Status == queue.StatusWaiting:
		fmt.Fprintf(w, "  Head: task %d, waiting to be released (the rescuer's next pass).\n", head.ID)
	default:
		fmt.Fprintf(w, "  Head: task %d, %s.\n", head.ID, head.Status)
	}
	if shown := int64(len(seq.Tasks)); shown < total {
		fmt.Fprintf(w, "  (showing %d: the unfinished ones, then the latest finished)\n", shown)
	}
	fmt.Fprintln(w)
	tw := table(w, "  ", "TASK", "NAME", "QUEUE", "STATUS", "ATTEMPT", "CREATED", "WHY")
	for _, t := range seq.Tasks {
		mark := ""
		if t.Head {
			mark = ">"
		}
		state := string(t.Status)
		if t.Hold {
			state += " (hold)"
		}
		row(tw, "  "+mark, t.ID, t.Name, t.Queue, state, t.Attempt, ago(t.CreatedAt)+" ago", orDash(clip(t.Why, 80)))
	}
	tw.Flush()
}

func (s sequenceJSON) head() *sequenceTaskJSON {
	for i := range s.Tasks {
		if s.Tasks[i].Head {
			return &s.Tasks[i]
		}
	}
	return nil
}

// shellQuote quotes s for a POSIX shell when it needs quoting, so that a
// command printed for an operator can be pasted.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":._/@%+=,-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
