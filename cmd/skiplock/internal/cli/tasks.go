package cli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/defaults"
	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

// taskJSON is a task as --json prints it.
type taskJSON struct {
	// Shard is the task's shard, when several are configured.
	Shard  *int         `json:"shard,omitempty"`
	ID     int64        `json:"id"`
	Queue  string       `json:"queue"`
	Name   string       `json:"name"`
	Status queue.Status `json:"status"`
	// Permanent is set on a failed task that failed for good before its
	// attempts ran out.
	Permanent   bool            `json:"permanent,omitempty"`
	Priority    int             `json:"priority"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	TimeoutMS   int64           `json:"timeout_ms,omitempty"`
	Payload     json.RawMessage `json:"payload"`
	// PayloadKeyID names the key that encrypted the payload
	// (queue.WithEncryption); absent for a payload in clear.
	PayloadKeyID string          `json:"payload_key_id,omitempty"`
	Metadata     json.RawMessage `json:"metadata"`
	// Output is what the handler recorded (worker.SetOutput); absent when
	// it recorded nothing.
	Output json.RawMessage `json:"output,omitempty"`
	// Progress and Checkpoint are what the handler last reported and saved
	// while running (worker.SetProgress, worker.SaveCheckpoint); absent
	// when none.
	Progress   json.RawMessage `json:"progress,omitempty"`
	Checkpoint json.RawMessage `json:"checkpoint,omitempty"`
	// WorkflowID, DependsOn and WaitingFor place a task in its workflow.
	WorkflowID int64   `json:"workflow_id,omitempty"`
	DependsOn  []int64 `json:"depends_on,omitempty"`
	WaitingFor int     `json:"waiting_for,omitempty"`
	// BatchID is the batch the task is a member or a callback of.
	BatchID int64 `json:"batch_id,omitempty"`
	// SequenceKey and SequenceHold place a task in its sequence.
	SequenceKey  string `json:"sequence_key,omitempty"`
	SequenceHold bool   `json:"sequence_hold,omitempty"`
	// ReplaceKey is the task's replace key (WithReplaceKey, WithDebounce).
	ReplaceKey string     `json:"replace_key,omitempty"`
	RunAt      time.Time  `json:"run_at"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	WorkerID   string     `json:"worker_id,omitempty"`
	// Attempts is the history: every attempt that did not succeed, then
	// the current or successful one.
	Attempts []attemptJSON `json:"attempts"`
	// Lock is who holds the task now (show only).
	Lock *lockJSON `json:"lock,omitempty"`
}

// attemptJSON is one attempt of a task's history.
type attemptJSON struct {
	Attempt    int        `json:"attempt"`
	Outcome    string     `json:"outcome"`
	Error      string     `json:"error,omitempty"`
	WorkerID   string     `json:"worker_id,omitempty"`
	Host       string     `json:"host,omitempty"`
	PID        int        `json:"pid,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// attempts is the history of t (queue.Task.History), with the times of an
// attempt not begun or not finished left out.
func attempts(t *queue.Task) []attemptJSON {
	history := t.History()
	out := make([]attemptJSON, len(history))
	for i, a := range history {
		out[i] = attemptJSON{
			Attempt: a.Attempt, Outcome: a.Outcome, Error: a.Error, WorkerID: a.WorkerID, Host: a.Host, PID: a.PID,
			StartedAt: timePtr(a.StartedAt), FinishedAt: timePtr(a.FinishedAt),
		}
	}
	return out
}

func toJSON(t *queue.Task) taskJSON {
	kid, _ := queue.EncryptedKeyID(t.Payload)
	return taskJSON{
		PayloadKeyID: kid,
		ID:           t.ID, Queue: t.Queue, Name: t.Name, Status: t.Status, Permanent: t.FailedPermanently(), Priority: t.Priority,
		Attempt: t.Attempt, MaxAttempts: t.MaxAttempts, TimeoutMS: t.Timeout.Milliseconds(),
		Payload: t.Payload, Metadata: t.Metadata, Output: t.Output, Progress: t.Progress, Checkpoint: t.Checkpoint, RunAt: t.RunAt, CreatedAt: t.CreatedAt,
		WorkflowID: t.WorkflowID, DependsOn: t.DependsOn, WaitingFor: t.WaitingFor, BatchID: t.BatchID,
		SequenceKey: t.SequenceKey, SequenceHold: t.SequenceHold, ReplaceKey: t.ReplaceKey,
		StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, WorkerID: t.WorkerID,
		Attempts: attempts(t),
	}
}

// printTasks writes tasks as a table.
func printTasks(w io.Writer, tasks []*queue.Task) {
	tw := table(w, "ID", "QUEUE", "NAME", "STATUS", "ATTEMPTS", "CREATED", "WHEN", "LAST ERROR")
	for _, t := range tasks {
		row(tw, t.ID, t.Queue, t.Name, stateLabel(t), fmt.Sprintf("%d/%d", t.Attempt, t.MaxAttempts),
			ago(t.CreatedAt)+" ago", when(t), clip(t.LastError(), 60))
	}
	tw.Flush()
}

// printTasks writes tasks as a table, with the shard of each when several
// are configured.
func (a *app) printTasks(w io.Writer, tasks []*queue.Task) {
	if !a.sharded() {
		printTasks(w, tasks)
		return
	}
	tw := table(w, "SHARD", "ID", "QUEUE", "NAME", "STATUS", "ATTEMPTS", "CREATED", "WHEN", "LAST ERROR")
	for _, t := range tasks {
		row(tw, queue.ShardOf(t.ID), t.ID, t.Queue, t.Name, stateLabel(t), fmt.Sprintf("%d/%d", t.Attempt, t.MaxAttempts),
			ago(t.CreatedAt)+" ago", when(t), clip(t.LastError(), 60))
	}
	tw.Flush()
}

// toJSON is toJSON with the task's shard when several are configured.
func (a *app) toJSON(t *queue.Task) taskJSON {
	out := toJSON(t)
	if a.sharded() {
		n := queue.ShardOf(t.ID)
		out.Shard = &n
	}
	return out
}

// stateLabel is a task's state for a table: a failed task says whether it
// failed for good or ran out of attempts.
func stateLabel(t *queue.Task) string {
	if t.Status != queue.StatusFailed {
		return string(t.Status)
	}
	if t.FailedPermanently() {
		return "failed (permanent)"
	}
	return "failed (out of attempts)"
}

// when says what the task's status means in time: due when, running
// since, finished when.
func when(t *queue.Task) string {
	switch t.Status {
	case queue.StatusPending, queue.StatusScheduled, queue.StatusRetrying:
		if d := time.Until(t.RunAt); d > 0 {
			return "due in " + short(d)
		}
		return "due " + ago(t.RunAt) + " ago"
	case queue.StatusRunning:
		if t.StartedAt != nil {
			return "for " + ago(*t.StartedAt)
		}
	default:
		if t.FinishedAt != nil {
			return ago(*t.FinishedAt) + " ago"
		}
	}
	return "-"
}

// filterFlags are the task filters that list, requeue and cancel share.
type filterFlags struct {
	queues        []string
	names         []string
	since         string
	errorContains string
}

func (f *filterFlags) register(c *cobra.Command, errorContains bool) {
	c.Flags().StringArrayVar(&f.queues, "queue", nil, "only tasks in this queue (repeat for several)")
	c.Flags().StringArrayVar(&f.names, "name", nil, "only tasks with this name (repeat for several)")
	c.Flags().StringVar(&f.since, "since", "", "only tasks that finished (or, unfinished, were created) since: a duration ago (2h, 7d) or a time (RFC 3339)")
	if errorContains {
		c.Flags().StringVar(&f.errorContains, "error-contains", "", "only tasks whose last error contains this text (ignoring case)")
	}
}

func (f *filterFlags) set() bool {
	return len(f.queues) > 0 || len(f.names) > 0 || f.since != "" || f.errorContains != ""
}

func (f *filterFlags) filter(statuses []queue.Status) (queue.Filter, error) {
	since, err := parseSince("since", f.since, time.Now())
	if err != nil {
		return queue.Filter{}, err
	}
	return queue.Filter{Statuses: statuses, Queues: f.queues, Names: f.names, Since: since, ErrorContains: f.errorContains}, nil
}

// describe words n tasks of a filter for prompts: "3 failed tasks in queue
// mail"; n < 0 leaves the number out.
func describe(f queue.Filter, n int64) string {
	var b strings.Builder
	sts := make([]string, len(f.Statuses))
	for i, s := range f.Statuses {
		sts[i] = string(s)
	}
	if n >= 0 {
		b.WriteString(count(n) + " ")
	}
	if len(sts) > 1 {
		b.WriteString(strings.Join(sts[:len(sts)-1], ", ") + " and " + sts[len(sts)-1])
	} else {
		b.WriteString(strings.Join(sts, ""))
	}
	if n == 1 {
		b.WriteString(" task")
	} else {
		b.WriteString(" tasks")
	}
	if len(f.Queues) > 0 {
		b.WriteString(" in queue " + strings.Join(f.Queues, ", "))
	}
	if len(f.Names) > 0 {
		b.WriteString(" named " + strings.Join(f.Names, ", "))
	}
	if !f.Since.IsZero() {
		b.WriteString(" since " + stamp(f.Since))
	}
	if !f.FinishedBefore.IsZero() {
		b.WriteString(" that finished before " + stamp(f.FinishedBefore))
	}
	if f.ErrorContains != "" {
		b.WriteString(fmt.Sprintf(" with error containing %q", f.ErrorContains))
	}
	return b.String()
}

func (a *app) listCommand() *cobra.Command {
	var (
		ff       filterFlags
		statuses []string
		limit    countFlag
		beforeID int64
		sequence string
	)
	c := newCommand(&cobra.Command{
		Use:   "list",
		Short: "List tasks, newest first",
		Long: `List tasks, newest first, with their state, attempts and last error.
Filters combine: a task must match all of them.

STATUS is one of waiting, scheduled (attempt 0, run time ahead), pending
(due now), retrying (attempt > 0, waiting out a retry's backoff), running,
completed, failed and cancelled; a failed task says why: failed
(permanent), by a permanent error or for want of a handler, or failed (out
of attempts). --status takes the same values.`,
		Example: `  skiplock list
  skiplock list --status failed --queue mail --since 24h
  skiplock list --status scheduled,pending,retrying --name email.send --limit 200
  skiplock list --status retrying      # pending tasks waiting out a retry's backoff
  skiplock list --status failed --error-contains timeout --json | jq '.[].id'
  skiplock list --sequence account:42  # a sequence's tasks (skiplock sequence show: in order)
  skiplock list --before 1000          # the page after task 1000`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sts, err := parseStatuses(statuses, queue.Statuses, nil)
			if err != nil {
				return err
			}
			f, err := ff.filter(sts)
			if err != nil {
				return err
			}
			if beforeID < 0 {
				return usageErrorf("--before must be a task ID, got %d", beforeID)
			}
			if cmd.Flags().Changed("sequence") && sequence == "" {
				return usageErrorf("--sequence needs a sequence key")
			}
			f.Sequence = sequence
			page := queue.Page{Limit: int(limit), BeforeID: beforeID}
			if err := invalidInput(f.Validate(), page.Validate()); err != nil {
				return err
			}
			set, done, err := a.openShards(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var tasks []*queue.Task
			for _, c := range set {
				got, err := c.client.List(cmd.Context(), f, page)
				if err != nil {
					return shardError(a, c, err)
				}
				tasks = append(tasks, got...)
			}
			if a.sharded() {
				// Newest first across shards: by ID, as on one.
				slices.SortFunc(tasks, func(x, y *queue.Task) int { return cmp.Compare(y.ID, x.ID) })
				tasks = tasks[:min(len(tasks), int(limit))]
			}
			if a.json {
				out := make([]taskJSON, len(tasks))
				for i, t := range tasks {
					out[i] = a.toJSON(t)
				}
				return a.printJSON(out)
			}
			if len(tasks) == 0 {
				fmt.Fprintln(a.env.Stdout, "No tasks match.")
				return nil
			}
			a.printTasks(a.env.Stdout, tasks)
			if len(tasks) == int(limit) {
				fmt.Fprintf(a.env.Stdout, "(first %d; more with --before %d or --limit)\n", limit, tasks[len(tasks)-1].ID)
			}
			return nil
		},
	})
	ff.register(c, true)
	c.Flags().StringSliceVar(&statuses, "status", nil, "only tasks in this status: waiting, scheduled, pending (due), retrying, running, completed, failed or cancelled (comma separated or repeated)")
	limit.register(c, "limit", defaults.ListLimit, "at most this many tasks")
	c.Flags().Int64Var(&beforeID, "before", 0, "only tasks with an ID below this one (the next page)")
	c.Flags().StringVar(&sequence, "sequence", "", "only tasks of this sequence key")
	return c
}

func (a *app) showCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:   "show ID",
		Short: "Show a task: payload, every attempt with its error, who holds it now",
		Long: `Show one task: its payload and metadata, its output, every attempt with its outcome,
error, worker, host and pid, and, while it runs, who holds its advisory lock
(the PostgreSQL session, its client and the worker process).`,
		Example: `  skiplock show 42
  skiplock show 42 --json | jq '.attempts[-1].error'`,
		Args: exactArgs(1, "show needs one task ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			client, done, err := a.openFor(cmd.Context(), "task", ids[0])
			if err != nil {
				return err
			}
			defer done()
			t, err := client.Get(cmd.Context(), ids[0])
			if err != nil {
				return err
			}
			var holder *ops.TaskLock
			if t.Status == queue.StatusRunning {
				if holder, err = ops.LockHolder(cmd.Context(), client, t.ID); err != nil {
					return err
				}
			}
			if a.json {
				out := toJSON(t)
				if holder != nil {
					l := toLockJSON(*holder)
					out.Lock = &l
				}
				return a.printJSON(out)
			}
			printTask(a.env.Stdout, t, holder)
			return nil
		},
	})
}

func printTask(w io.Writer, t *queue.Task, holder *ops.TaskLock) {
	timeout := "the worker's"
	if t.Timeout > 0 {
		timeout = t.Timeout.String()
	}
	fmt.Fprintf(w, "Task %d\n", t.ID)
	tw := table(w, "  Name:", t.Name)
	row(tw, "  Queue:", t.Queue)
	status := string(t.Status)
	if why := t.Why(time.Now()); why != "" {
		status += ": " + why
	}
	row(tw, "  Status:", status)
	row(tw, "  Priority:", t.Priority)
	row(tw, "  Attempts:", fmt.Sprintf("%d of %d", t.Attempt, t.MaxAttempts))
	row(tw, "  Timeout:", timeout)
	row(tw, "  Created:", stamp(t.CreatedAt)+" ("+ago(t.CreatedAt)+" ago)")
	row(tw, "  Run at:", stamp(t.RunAt))
	row(tw, "  Started:", stampPtr(t.StartedAt))
	row(tw, "  Finished:", stampPtr(t.FinishedAt))
	if t.WorkerID != "" {
		row(tw, "  Worker:", t.WorkerID)
	}
	if t.WorkflowID != 0 {
		row(tw, "  Workflow:", fmt.Sprintf("%d (skiplock workflow show %d)", t.WorkflowID, t.WorkflowID))
	}
	if t.BatchID != 0 {
		row(tw, "  Batch:", fmt.Sprintf("%d (skiplock batch show %d)", t.BatchID, t.BatchID))
	}
	if t.SequenceKey != "" {
		hold := ""
		if t.SequenceHold {
			hold = ", held by this task if it fails for good"
		}
		row(tw, "  Sequence:", fmt.Sprintf("%s%s (skiplock sequence show %s)", t.SequenceKey, hold, shellQuote(t.SequenceKey)))
	}
	if t.ReplaceKey != "" {
		row(tw, "  Replace key:", t.ReplaceKey)
	}
	if len(t.DependsOn) > 0 {
		deps := make([]string, len(t.DependsOn))
		for i, d := range t.DependsOn {
			deps[i] = strconv.FormatInt(d, 10)
		}
		row(tw, "  Depends on:", fmt.Sprintf("%s (%d not completed)", strings.Join(deps, ", "), t.WaitingFor))
	}
	tw.Flush()
	fmt.Fprintf(w, "  Payload:   %s\n", payloadText(t.Payload))
	fmt.Fprintf(w, "  Metadata:  %s\n", indentJSON(t.Metadata, "             "))
	if t.Output != nil {
		fmt.Fprintf(w, "  Output:    %s\n", indentJSON(t.Output, "             "))
	}
	if t.Progress != nil {
		fmt.Fprintf(w, "  Progress:  %s\n", indentJSON(t.Progress, "             "))
	}
	if t.Checkpoint != nil {
		fmt.Fprintf(w, "  Checkpoint: %s\n", indentJSON(t.Checkpoint, "              "))
	}

	hist := attempts(t)
	fmt.Fprintln(w)
	if len(hist) == 0 {
		fmt.Fprintln(w, "Attempts: none yet")
	} else {
		fmt.Fprintln(w, "Attempts:")
		tw = table(w, "  #", "OUTCOME", "STARTED", "FINISHED", "WORKER", "HOST", "PID")
		for _, h := range hist {
			pid := "-"
			if h.PID != 0 {
				pid = strconv.Itoa(h.PID)
			}
			row(tw, fmt.Sprintf("  %d", h.Attempt), h.Outcome, stampPtr(h.StartedAt), stampPtr(h.FinishedAt),
				orDash(h.WorkerID), orDash(h.Host), pid)
		}
		tw.Flush()
		for _, h := range hist {
			if h.Error != "" {
				fmt.Fprintf(w, "  #%d %s: %s\n", h.Attempt, h.Outcome, indentText(h.Error, "      "))
			}
		}
	}

	if t.Status != queue.StatusRunning {
		return
	}
	fmt.Fprintln(w)
	if holder == nil {
		fmt.Fprintln(w, "Lock: nobody holds it; its worker's session is gone, and the rescuer will return it to pending")
		return
	}
	fmt.Fprintf(w, "Lock: held for %s by PostgreSQL backend %d (%s)", short(holder.HeldFor), holder.PID, session(*holder))
	if holder.WorkerID != "" {
		fmt.Fprintf(w, ", worker %s on %s pid %d", holder.WorkerID, holder.WorkerHost, holder.WorkerPID)
	}
	fmt.Fprintln(w)
}

func session(l ops.TaskLock) string {
	client := l.ClientAddr
	if client == "" {
		client = "local socket"
	}
	app := l.ApplicationName
	if app == "" {
		app = "no application_name"
	}
	return app + ", " + client
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func indentJSON(raw json.RawMessage, prefix string) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, prefix, "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

func indentText(s, prefix string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

// exactArgs wants n positional arguments.
func exactArgs(n int, msg string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s, got %d arguments (see `%s --help`)", msg, len(args), cmd.CommandPath())
		}
		return nil
	}
}

func (a *app) enqueueCommand() *cobra.Command {
	var (
		queueName   string
		priority    int
		delay       time.Duration
		runAt       string
		maxAttempts int
		timeout     time.Duration
		metadata    string
		uniqueKey   string
		unique      bool
		uniqueFor   time.Duration
		exclusive   string
		sequence    string
		seqHold     bool
		replaceKey  string
		debounce    time.Duration
	)
	c := newCommand(&cobra.Command{
		Use:   "enqueue NAME [PAYLOAD|-]",
		Short: "Enqueue a task",
		Long: `Enqueue a task named NAME with a JSON payload (default null); - reads the
payload from stdin. Prints the new task's ID, or the task with --json.

With --unique-key (or --unique, a key from the name and payload), a task
whose key is held by a pending or running task is not enqueued: the command
prints the existing task's ID, says so on stderr and exits 0 (with
--unique-window, at most one task per key per window, whatever its status).
With --exclusive-key, at most one task with the key runs at a time. With
--sequence, the tasks of the key run one at a time, in the order they were
enqueued (--sequence-hold: a failure for good holds the rest). With
--replace-key, a task of the key that has not started yet is replaced by
this one (payload, run time, ...; it keeps its ID, and stderr says so)
instead of adding a task; --debounce D also sets its run time to D from
now, so a burst of calls runs once, D after the last.`,
		Example: `  skiplock enqueue email.send '{"to":"ada@example.com"}'
  skiplock enqueue report.build --queue reports --priority -1 --delay 10m
  skiplock enqueue sync --run-at 2026-01-02T03:00:00Z --max-attempts 3 --timeout 5m
  jq -c . order.json | skiplock enqueue order.process - --metadata '{"trace":"abc"}'
  skiplock enqueue sync.account '{"id":7}' --unique-key sync:7     # not twice while one waits or runs
  skiplock enqueue digest.send --unique --unique-window 24h           # once a day per name and payload
  skiplock enqueue ledger.post '{"account":7}' --exclusive-key account:7
  skiplock enqueue ledger.apply '{"account":7,"amount":5}' --sequence account:7 --sequence-hold
  skiplock enqueue search.index '{"doc":42}' --replace-key doc:42 --debounce 5s   # once, 5s after the last call`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageErrorf("enqueue needs a task name and at most one payload, got %d arguments (see `%s --help`)", len(args), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			payload := json.RawMessage("null")
			if len(args) == 2 {
				payload = json.RawMessage(args[1])
				if args[1] == "-" {
					b, err := io.ReadAll(a.env.Stdin)
					if err != nil {
						return fmt.Errorf("reading the payload from stdin: %w", err)
					}
					payload = bytes.TrimSpace(b)
				}
				if err := checkJSON(payload); err != nil {
					return usageErrorf("payload is not valid JSON: %v", err)
				}
			}
			opts := []queue.Option{queue.WithQueue(queueName), queue.WithPriority(priority), queue.WithMaxAttempts(maxAttempts)}
			if priority < math.MinInt16 || priority > math.MaxInt16 {
				return usageErrorf("--priority %d is outside %d..%d", priority, math.MinInt16, math.MaxInt16)
			}
			if maxAttempts < 1 {
				return usageErrorf("--max-attempts must be at least 1, got %d", maxAttempts)
			}
			if delay < 0 {
				return usageErrorf("--delay must not be negative, got %s", delay)
			}
			if delay > 0 {
				opts = append(opts, queue.WithDelay(delay))
			}
			if runAt != "" {
				t, err := time.Parse(time.RFC3339, runAt)
				if err != nil {
					return usageErrorf("--run-at %q is not an RFC 3339 time (want e.g. 2026-01-02T15:04:05Z)", runAt)
				}
				opts = append(opts, queue.WithRunAt(t))
			}
			if timeout != 0 {
				if timeout < time.Millisecond {
					return usageErrorf("--timeout must be at least 1ms, got %s", timeout)
				}
				opts = append(opts, queue.WithTimeout(timeout))
			}
			if metadata != "" {
				var m map[string]json.RawMessage
				if err := json.Unmarshal([]byte(metadata), &m); err != nil || m == nil {
					return usageErrorf("--metadata must be a JSON object, got %s", clip(metadata, 40))
				}
				opts = append(opts, queue.WithMetadata(json.RawMessage(metadata)))
			}
			if uniqueKey != "" && unique {
				return usageErrorf("--unique-key and --unique both set the unique key; pass one")
			}
			if uniqueFor != 0 && uniqueKey == "" && !unique {
				return usageErrorf("--unique-window needs --unique-key or --unique")
			}
			// WithDuplicateError: the error names the key, derived or not.
			switch {
			case uniqueKey != "":
				opts = append(opts, queue.WithUniqueKey(uniqueKey), queue.WithDuplicateError())
			case unique:
				opts = append(opts, queue.WithUnique(), queue.WithDuplicateError())
			}
			if uniqueFor != 0 {
				if uniqueFor < time.Second {
					return usageErrorf("--unique-window must be at least 1s, got %s", uniqueFor)
				}
				opts = append(opts, queue.WithUniqueWindow(uniqueFor))
			}
			if exclusive != "" {
				opts = append(opts, queue.WithExclusiveKey(exclusive))
			}
			if cmd.Flags().Changed("sequence") {
				if (uniqueKey != "" || unique) && uniqueFor == 0 {
					return usageErrorf("--sequence cannot be combined with a unique key unless it has a --unique-window")
				}
				opts = append(opts, queue.WithSequence(sequence))
			}
			if seqHold {
				if sequence == "" {
					return usageErrorf("--sequence-hold needs --sequence")
				}
				opts = append(opts, queue.WithSequenceHold())
			}
			switch {
			case cmd.Flags().Changed("debounce") && !cmd.Flags().Changed("replace-key"):
				return usageErrorf("--debounce needs --replace-key")
			case cmd.Flags().Changed("debounce"):
				opts = append(opts, queue.WithDebounce(replaceKey, debounce))
			case cmd.Flags().Changed("replace-key"):
				opts = append(opts, queue.WithReplaceKey(replaceKey))
			}
			// Names, keys and sizes are checked by the client, which
			// reports them to Go code: bad input all the same (ExitUsage).
			client, done, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := client.Enqueue(cmd.Context(), args[0], payload, opts...)
			var dup *queue.DuplicateError
			if errors.As(err, &dup) && dup.ExistingID != 0 {
				fmt.Fprintf(a.env.Stderr, "skiplock: enqueue: not enqueued: task %d holds unique key %q\n", dup.ExistingID, dup.Key)
				err = nil
			}
			if errors.Is(err, queue.ErrInvalidTask) {
				return invalidInput(err)
			}
			if err != nil {
				return err
			}
			if res.Replaced {
				fmt.Fprintf(a.env.Stderr, "skiplock: enqueue: replaced pending task %d of replace key %q\n", res.ID, replaceKey)
			}
			if !a.json {
				fmt.Fprintln(a.env.Stdout, res.ID)
				return nil
			}
			t, err := client.Get(cmd.Context(), res.ID)
			if err != nil {
				return err
			}
			return a.printJSON(toJSON(t))
		},
	})
	fl := c.Flags()
	fl.StringVar(&queueName, "queue", queue.DefaultQueue, "queue to put the task in")
	fl.IntVar(&priority, "priority", 0, "lower runs first; may be negative")
	durationVar(fl, &delay, "delay", 0, "run no sooner than this long from now (e.g. 30s, 10m)")
	fl.StringVar(&runAt, "run-at", "", "run no sooner than this time (RFC 3339); overrides --delay")
	fl.IntVar(&maxAttempts, "max-attempts", queue.DefaultMaxAttempts, "how many times the task may run before it stays failed")
	durationVar(fl, &timeout, "timeout", 0, "bound each attempt (default: the worker's TaskTimeout)")
	fl.StringVar(&metadata, "metadata", "", "a JSON object that handlers can read beside the payload")
	fl.StringVar(&uniqueKey, "unique-key", "", "enqueue nothing while a task with this key is pending or running")
	fl.BoolVar(&unique, "unique", false, "like --unique-key, with a key made of the name and the payload")
	durationVar(fl, &uniqueFor, "unique-window", 0, "with --unique-key or --unique: one task per key per window (e.g. 1h, 24h), whatever its status")
	fl.StringVar(&exclusive, "exclusive-key", "", "run at most one task with this key at a time, across every worker")
	fl.StringVar(&sequence, "sequence", "", "run the tasks of this key one at a time, in the order they were enqueued")
	fl.StringVar(&replaceKey, "replace-key", "", "replace the task of this key that has not started yet, instead of adding one")
	durationVar(fl, &debounce, "debounce", 0, "with --replace-key: run this long after this call (e.g. 5s), each call moving it")
	fl.BoolVar(&seqHold, "sequence-hold", false, "with --sequence: if this task fails for good, the rest of its sequence waits until it is requeued or cancelled")
	return c
}

// checkJSON reports why raw is not one JSON value.
func checkJSON(raw []byte) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return fmt.Errorf("it is empty")
	}
	var v any
	return json.Unmarshal(raw, &v)
}

// payloadText is a payload as show prints it: indented JSON, or, for an
// encrypted payload, which the command cannot read, the key that reads it.
func payloadText(p json.RawMessage) string {
	if kid, ok := queue.EncryptedKeyID(p); ok {
		return encryptedText(kid)
	}
	return indentJSON(p, "             ")
}

func encryptedText(kid string) string {
	if kid == "" {
		return "encrypted (malformed envelope)"
	}
	return fmt.Sprintf("encrypted (key %s)", kid)
}
