package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/defaults"
	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

// requeueReason is recorded in the history of the tasks the command requeues.
const requeueReason = "requeued by skiplock requeue"

// runningNotCancelled is said of a running task that cancel leaves alone.
const (
	runningNotCancelled    = "running, not cancelled (add --status running to stop running tasks too)"
	runningCancelRequested = "cancellation requested (running; its worker stops the handler)"
)

// changeJSON is what requeue, cancel and purge print with --json.
type changeJSON struct {
	Action string `json:"action"`
	DryRun bool   `json:"dry_run"`
	// Count is how many tasks were changed (dry run: would be).
	Count int64 `json:"count"`
	// IDs are the named tasks that were (would be) changed.
	IDs []int64 `json:"ids,omitempty"`
	// Skipped are the named tasks that were (would be) left alone.
	Skipped []skipJSON `json:"skipped,omitempty"`
	// Tasks is a dry run's sample of the matching tasks, newest first.
	Tasks []taskJSON `json:"tasks,omitempty"`
	// Requested are the named running tasks whose cancellation was
	// requested (cancel only).
	Requested []int64 `json:"requested,omitempty"`
}

type skipJSON struct {
	ID     int64        `json:"id"`
	Status queue.Status `json:"status,omitempty"`
	Reason string       `json:"reason"`
	// OK is set when the task is already where the command would put it.
	OK bool `json:"ok"`
}

// byIDs is a change of named tasks.
type byIDs struct {
	action string // requeue
	past   string // requeued
	ids    []int64
	fine   []queue.Status // a task skipped in one of these is fine (already there)
	dryRun bool
	why    func(queue.Status) string
	// run changes ids, tasks of client's database.
	run func(ctx context.Context, client *queue.Client, ids []int64) (changed []int64, skipped []queue.SkippedTask, err error)
	// runTx, for --dry-run, makes the same change within tx, which is
	// rolled back: the statements that would change the tasks say which.
	runTx func(ctx context.Context, client *queue.Client, tx queue.Executor, ids []int64) (changed []int64, skipped []queue.SkippedTask, err error)
	// requested, if set, lists the skipped tasks that got a request
	// instead (cancel: running tasks), once run has run.
	requested func() []int64
}

func (a *app) changeByIDs(ctx context.Context, set shardSet, c byIDs) error {
	var (
		changed  []int64
		skipped  []queue.SkippedTask
		err      error
		shardErr error
	)
	if !a.sharded() {
		client := set[0].client
		if c.dryRun {
			err = a.rolledBack(ctx, func(tx queue.Executor) error {
				changed, skipped, err = c.runTx(ctx, client, tx, c.ids)
				return err
			})
		} else {
			changed, skipped, err = c.run(ctx, client, c.ids)
		}
		if err != nil {
			return err
		}
	} else {
		// Each ID on its shard; a shard that fails does not stop the
		// others, and the report says what the others did.
		if changed, skipped, shardErr = a.changeOnShards(ctx, set, c); shardErr != nil && len(changed)+len(skipped) == 0 {
			return shardErr
		}
	}

	out := changeJSON{Action: c.action, DryRun: c.dryRun, Count: int64(len(changed)), IDs: changed}
	var failed []string
	for _, s := range skipped {
		reason := "not found"
		if s.Status != "" {
			reason = c.why(s.Status)
		}
		ok := s.Status != "" && slices.Contains(c.fine, s.Status)
		out.Skipped = append(out.Skipped, skipJSON{ID: s.ID, Status: s.Status, Reason: reason, OK: ok})
		if !ok {
			failed = append(failed, fmt.Sprintf("%d %s", s.ID, reason))
		}
	}

	if c.requested != nil && !c.dryRun {
		out.Requested = c.requested()
	}
	if a.json {
		if err := a.printJSON(out); err != nil {
			return err
		}
	} else {
		verb := c.past
		if c.dryRun {
			verb = "would be " + c.past
		}
		switch {
		case len(changed)+len(out.Skipped) == 1:
			// One task: one sentence says what happened to it.
			var id int64
			result := verb
			if len(changed) == 1 {
				id = changed[0]
			} else {
				id, result = out.Skipped[0].ID, out.Skipped[0].Reason
			}
			dry := ""
			if c.dryRun {
				dry = " (dry run: nothing was changed)"
			}
			fmt.Fprintf(a.env.Stdout, "Task %d: %s%s.\n", id, result, dry)
		default:
			tw := table(a.env.Stdout, "ID", "RESULT")
			for _, id := range changed {
				row(tw, id, verb)
			}
			for _, s := range out.Skipped {
				row(tw, s.ID, s.Reason)
			}
			tw.Flush()
			if c.dryRun {
				fmt.Fprintf(a.env.Stdout, "Dry run: %s would be %s; nothing was changed.\n", plural(out.Count, "task", "tasks"), c.past)
				break
			}
			var parts []string
			if out.Count > 0 || len(out.Requested) == 0 {
				parts = append(parts, fmt.Sprintf("%s %s", capitalize(c.past), plural(out.Count, "task", "tasks")))
			}
			if len(out.Requested) > 0 {
				parts = append(parts, fmt.Sprintf("cancellation requested for %s", plural(int64(len(out.Requested)), "running task", "running tasks")))
			}
			fmt.Fprintf(a.env.Stdout, "%s.\n", capitalize(strings.Join(parts, "; ")))
		}
	}
	if len(failed) > 0 {
		n := len(failed)
		if n > 3 {
			failed = append(failed[:3], "…")
		}
		if shardErr != nil {
			return fmt.Errorf("%w; and %d of %d tasks not %s: %s", shardErr, n, len(out.IDs)+len(out.Skipped), c.past, strings.Join(failed, "; "))
		}
		return partialErrorf("%d of %d tasks not %s: %s", n, len(out.IDs)+len(out.Skipped), c.past, strings.Join(failed, "; "))
	}
	return shardErr
}

// changeOnShards makes c's change on the shard of each of its IDs, one
// shard after another; the error joins each failed shard's, named.
func (a *app) changeOnShards(ctx context.Context, set shardSet, c byIDs) (changed []int64, skipped []queue.SkippedTask, err error) {
	order, groups, err := set.byShard(c.ids)
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, sc := range order {
		var (
			ch []int64
			sk []queue.SkippedTask
			e  error
		)
		if c.dryRun {
			e = rolledBack(ctx, sc.pool, func(tx queue.Executor) error {
				ch, sk, e = c.runTx(ctx, sc.client, tx, groups[sc.n])
				return e
			})
		} else {
			ch, sk, e = c.run(ctx, sc.client, groups[sc.n])
		}
		changed, skipped = append(changed, ch...), append(skipped, sk...)
		if e != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", sc.n, e))
		}
	}
	return changed, skipped, errors.Join(errs...)
}

// bulk is a change of the tasks a filter selects.
type bulk struct {
	action string // requeue
	past   string // requeued
	filter queue.Filter
	dryRun bool
	yes    bool
	limit  int // dry run sample
	// run makes the change on client's database.
	run func(ctx context.Context, client *queue.Client, progress func(int64)) (int64, error)
	// after, if set, adds a note once the change is done on the databases
	// of clients.
	after func(ctx context.Context, clients []*queue.Client) (string, error)
}

func (a *app) changeBulk(ctx context.Context, set shardSet, b bulk) error {
	if a.sharded() {
		return a.changeBulkShards(ctx, set, b)
	}
	client := set[0].client
	n, err := ops.Count(ctx, client, b.filter)
	if err != nil {
		return err
	}
	if b.dryRun {
		tasks, err := client.List(ctx, b.filter, queue.Page{Limit: b.limit})
		if err != nil {
			return err
		}
		if a.json {
			out := changeJSON{Action: b.action, DryRun: true, Count: n, Tasks: make([]taskJSON, len(tasks))}
			for i, t := range tasks {
				out.Tasks[i] = toJSON(t)
			}
			return a.printJSON(out)
		}
		fmt.Fprintf(a.env.Stdout, "Dry run: %s would be %s; nothing was changed.\n", describe(b.filter, n), b.past)
		if len(tasks) > 0 {
			printTasks(a.env.Stdout, tasks)
			if int64(len(tasks)) < n {
				fmt.Fprintf(a.env.Stdout, "(the newest %d of %s; see more with --limit)\n", len(tasks), count(n))
			}
		}
		return nil
	}

	var note string
	if n == 0 {
		if !a.json {
			fmt.Fprintf(a.env.Stdout, "No %s; nothing %s.\n", describe(b.filter, -1), b.past)
		}
	} else {
		if err := a.confirm(b.yes, fmt.Sprintf("%s %s?", capitalize(b.action), describe(b.filter, n))); err != nil {
			return err
		}
		p := a.progress(b.past, n)
		done, err := b.run(ctx, client, p.update)
		p.done()
		if err != nil {
			if done > 0 {
				return fmt.Errorf("%s after %s tasks were %s: %w", b.action, count(done), b.past, err)
			}
			return err
		}
		n = done
		if !a.json {
			fmt.Fprintf(a.env.Stdout, "%s %s.\n", capitalize(b.past), plural(done, "task", "tasks"))
		}
	}
	if b.after != nil {
		if note, err = b.after(ctx, []*queue.Client{client}); err != nil {
			return err
		}
		if note != "" && !a.json {
			fmt.Fprintln(a.env.Stdout, note)
		}
	}
	if a.json {
		return a.printJSON(changeJSON{Action: b.action, Count: n})
	}
	return nil
}

// bulkFlags are the flags that requeue, cancel and purge share.
type bulkFlags struct {
	dryRun, yes  bool
	batch, limit countFlag
}

func (f *bulkFlags) register(c *cobra.Command, batch int, dryRunUsage string) {
	c.Flags().BoolVar(&f.dryRun, "dry-run", false, dryRunUsage)
	c.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation")
	f.batch.register(c, "batch-size", batch, "tasks per transaction")
	f.limit.register(c, "limit", defaults.ListLimit, "with --dry-run, list at most this many tasks")
}

// open connects, unless the input is bad: the request's error (its
// Validate), or a --limit that List would refuse.
func (f *bulkFlags) open(ctx context.Context, a *app, request error) (*queue.Client, func(), error) {
	if err := invalidInput(request, queue.Page{Limit: int(f.limit)}.Validate()); err != nil {
		return nil, nil, err
	}
	return a.open(ctx)
}

// openShards is open on every configured shard.
func (f *bulkFlags) openShards(ctx context.Context, a *app, request error) (shardSet, func(), error) {
	if err := invalidInput(request, queue.Page{Limit: int(f.limit)}.Validate()); err != nil {
		return nil, nil, err
	}
	return a.openShards(ctx)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func (a *app) requeueCommand() *cobra.Command {
	var (
		ff                       filterFlags
		failed, cancelled, reset bool
		bf                       bulkFlags
	)
	c := newCommand(&cobra.Command{
		Use:   "requeue [ID...]",
		Short: "Requeue failed (or cancelled) tasks: back to pending, due now",
		Long: `Requeue failed tasks, and cancelled ones with --cancelled, back to pending,
due now, and wake the workers of their queues.

Name the tasks by ID, or select them with --failed and/or --cancelled and
the filters. A selection asks for confirmation (--yes skips it; without a
terminal it is required); --dry-run shows how many and which tasks would be
requeued, and changes nothing.

A requeued task keeps its attempt count and gets at least one more attempt
(max attempts is raised if it had used them all); --reset-attempts starts
its attempts again from zero. Its error history is kept, and an entry with
outcome "requeued" records the requeue.

Safe while workers run: tasks are requeued in batches (--batch-size, one
transaction each), and only tasks that are failed (or cancelled) when their
batch locks them change. A running task is never touched.

Exit code 3 when a named task could not be requeued (running, completed,
not found); a task already pending is fine.`,
		Example: `  skiplock requeue 42 43
  skiplock requeue 42 --cancelled --reset-attempts
  skiplock requeue --failed --queue mail --since 2h --dry-run
  skiplock requeue --failed --name email.send --error-contains "connection refused" --yes
  skiplock requeue --failed --cancelled --since 2026-01-02T00:00:00Z --json --yes`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			var statuses []queue.Status
			switch {
			case len(ids) > 0 && (failed || ff.set()):
				return usageErrorf("name task IDs or select tasks with filters (--failed, --queue...), not both")
			case len(ids) > 0:
				statuses = []queue.Status{queue.StatusFailed}
			case !failed && !cancelled:
				return usageErrorf("name task IDs, or select tasks with --failed and/or --cancelled (see `skiplock requeue --help`)")
			case failed:
				statuses = []queue.Status{queue.StatusFailed}
			}
			if cancelled {
				statuses = append(statuses, queue.StatusCancelled)
			}
			f, err := ff.filter(statuses)
			if err != nil {
				return err
			}
			reason := requeueReason
			if reset {
				reason += " (attempts reset)"
			}
			req := queue.RequeueRequest{ResetAttempts: reset, Reason: reason, BatchSize: int(bf.batch), Filter: f}
			if len(ids) > 0 {
				req.Filter = queue.Filter{IDs: ids, Statuses: statuses}
			}
			set, done, err := bf.openShards(cmd.Context(), a, req.Validate())
			if err != nil {
				return err
			}
			defer done()

			if len(ids) > 0 {
				return a.changeByIDs(cmd.Context(), set, byIDs{
					action: "requeue", past: "requeued", ids: ids, dryRun: bf.dryRun,
					fine: []queue.Status{queue.StatusScheduled, queue.StatusPending, queue.StatusRetrying},
					why: func(s queue.Status) string {
						switch s {
						case queue.StatusScheduled, queue.StatusPending, queue.StatusRetrying:
							return "already " + string(s)
						case queue.StatusRunning:
							return "running, not requeued"
						case queue.StatusCancelled:
							return "cancelled, not requeued (add --cancelled to requeue it)"
						}
						return string(s) + ", not requeued (only failed and cancelled tasks are)"
					},
					run: func(ctx context.Context, client *queue.Client, ids []int64) ([]int64, []queue.SkippedTask, error) {
						req := req
						req.Filter.IDs = ids
						res, err := client.Requeue(ctx, req)
						return res.IDs, res.Skipped, err
					},
					runTx: func(ctx context.Context, client *queue.Client, tx queue.Executor, ids []int64) ([]int64, []queue.SkippedTask, error) {
						req := req
						req.Filter.IDs = ids
						res, err := client.RequeueTx(ctx, tx, req)
						return res.IDs, res.Skipped, err
					},
				})
			}
			return a.changeBulk(cmd.Context(), set, bulk{
				action: "requeue", past: "requeued", filter: f, dryRun: bf.dryRun, yes: bf.yes, limit: int(bf.limit),
				run: func(ctx context.Context, client *queue.Client, progress func(int64)) (int64, error) {
					req.Progress = progress
					res, err := client.Requeue(ctx, req)
					return res.Changed, err
				},
			})
		},
	})
	ff.register(c, true)
	fl := c.Flags()
	fl.BoolVar(&failed, "failed", false, "select failed tasks (with the filters)")
	fl.BoolVar(&cancelled, "cancelled", false, "select cancelled tasks too; with IDs, allow requeueing cancelled ones")
	fl.BoolVar(&reset, "reset-attempts", false, "start the tasks' attempts again from zero")
	bf.register(c, defaults.RequeueBatch, "show how many and which tasks would be requeued; change nothing")
	return c
}

func (a *app) cancelCommand() *cobra.Command {
	var (
		requested    int64
		requestedIDs []int64
		ff           filterFlags
		statuses     []string
		bf           bulkFlags
	)
	c := newCommand(&cobra.Command{
		Use:   "cancel [ID...]",
		Short: "Cancel pending, failed or running tasks",
		Long: `Cancel tasks. Waiting, scheduled, pending, retrying and failed tasks
become cancelled at once and are not run again unless requeued (skiplock
requeue --cancelled). For a running task, cancellation is requested: the
worker running it, on whichever machine, cancels its handler's context at
once (NOTIFY, with a poll as fallback); if the handler then returns an
error the task ends cancelled, if it returns nil it ends completed.

Name the tasks by ID (running ones included), or select them with filters
(--status, --queue, --name, --since, --error-contains); a selection covers
every status but running unless --status says which, and asks for
confirmation (--yes skips it; without a terminal it is required).

A named task that is completed or not found is reported, and the exit code
is 3; a task already cancelled is fine.`,
		Example: `  skiplock cancel 42 43
  skiplock cancel --status scheduled,pending --queue reports --name report.build --dry-run
  skiplock cancel --status running --name video.encode --yes
  skiplock cancel --status failed --since 7d --yes`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			cancellable := []queue.Status{queue.StatusWaiting, queue.StatusScheduled, queue.StatusPending, queue.StatusRetrying, queue.StatusFailed}
			sts, err := parseStatuses(statuses, append(slices.Clone(cancellable), queue.StatusRunning), map[queue.Status]string{
				queue.StatusCompleted: "completed tasks cannot be cancelled (purge them with skiplock purge)",
				queue.StatusCancelled: "these tasks are already cancelled",
			})
			if err != nil {
				return err
			}
			switch {
			case len(ids) > 0 && (len(sts) > 0 || ff.set()):
				return usageErrorf("name task IDs or select tasks with filters (--status, --queue...), not both")
			case len(ids) == 0 && len(sts) == 0 && !ff.set():
				return usageErrorf("name task IDs, or select tasks with --status, --queue, --name, --since or --error-contains (see `skiplock cancel --help`)")
			}
			if len(sts) == 0 {
				sts = cancellable
			}
			withRunning := slices.Contains(sts, queue.StatusRunning)
			f, err := ff.filter(sts) // running tasks get a request instead
			if err != nil {
				return err
			}
			req := queue.CancelRequest{Filter: f, BatchSize: int(bf.batch)}
			if len(ids) > 0 {
				req.Filter = queue.Filter{IDs: ids, Statuses: []queue.Status{queue.StatusWaiting, queue.StatusScheduled,
					queue.StatusPending, queue.StatusRetrying, queue.StatusFailed, queue.StatusRunning}}
			}
			set, done, err := bf.openShards(cmd.Context(), a, req.Validate())
			if err != nil {
				return err
			}
			defer done()

			if len(ids) > 0 {
				return a.changeByIDs(cmd.Context(), set, byIDs{
					action: "cancel", past: "cancelled", ids: ids, dryRun: bf.dryRun,
					fine: []queue.Status{queue.StatusCancelled, queue.StatusRunning},
					why: func(s queue.Status) string {
						switch s {
						case queue.StatusCancelled:
							return "already cancelled"
						case queue.StatusRunning:
							if bf.dryRun {
								return "running: cancellation would be requested"
							}
							return runningCancelRequested
						}
						return string(s) + ", not cancelled"
					},
					run: func(ctx context.Context, client *queue.Client, ids []int64) ([]int64, []queue.SkippedTask, error) {
						// One operator change, one audit record (per
						// shard): the running tasks named get their
						// request in the same call.
						req := req
						req.Filter.IDs = ids
						res, err := client.Cancel(ctx, req)
						if err != nil {
							return nil, nil, err
						}
						requestedIDs = append(requestedIDs, res.Requested...)
						return res.IDs, res.Skipped, nil
					},
					runTx: func(ctx context.Context, client *queue.Client, tx queue.Executor, ids []int64) ([]int64, []queue.SkippedTask, error) {
						req := req
						req.Filter.IDs = ids
						res, err := client.CancelTx(ctx, tx, req)
						return res.IDs, res.Skipped, err
					},
					requested: func() []int64 { return requestedIDs },
				})
			}
			return a.changeBulk(cmd.Context(), set, bulk{
				action: "cancel", past: "cancelled", filter: f, dryRun: bf.dryRun, yes: bf.yes, limit: int(bf.limit),
				run: func(ctx context.Context, client *queue.Client, progress func(int64)) (int64, error) {
					// One operator change, one audit record (per shard):
					// the running tasks get their request in the same call.
					req.Progress = progress
					res, err := client.Cancel(ctx, req)
					n := int64(len(res.Requested))
					requested += n
					return res.Changed + n, err
				},
				after: func(ctx context.Context, clients []*queue.Client) (string, error) {
					if withRunning {
						if requested == 0 {
							return "", nil
						}
						return fmt.Sprintf("Of these, %s: cancellation requested; their workers stop the handlers.",
							plural(requested, "was running", "were running")), nil
					}
					running := f
					running.Statuses = []queue.Status{queue.StatusRunning}
					var n int64
					for _, client := range clients {
						k, err := ops.Count(ctx, client, running)
						if err != nil {
							return "", err
						}
						n += k
					}
					if n == 0 {
						return "", nil
					}
					return fmt.Sprintf("%s matching the other filters: %s.", plural(n, "task is", "tasks are"), runningNotCancelled), nil
				},
			})
		},
	})
	ff.register(c, true)
	fl := c.Flags()
	fl.StringSliceVar(&statuses, "status", nil, "select tasks in this status: waiting, scheduled, pending, retrying, failed, running (default all but running)")
	bf.register(c, defaults.CancelBatch, "show how many and which tasks would be cancelled; change nothing")
	return c
}

func (a *app) purgeCommand() *cobra.Command {
	var (
		olderThan string
		statuses  []string
		queues    []string
		names     []string
		bf        bulkFlags
	)
	c := newCommand(&cobra.Command{
		Use:   "purge",
		Short: "Delete finished tasks older than a duration",
		Long: `Delete completed, failed and cancelled tasks that finished more than
--older-than ago (default 168h, a week), with their history. Pending and
running tasks are never deleted.

Deletes in batches (--batch-size, one transaction each) and shows progress.
Asks for confirmation (--yes skips it; without a terminal it is required).`,
		Example: `  skiplock purge --dry-run
  skiplock purge --older-than 720h --status completed --yes
  skiplock purge --older-than 30d --queue reports`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			age, err := parseDuration("older-than", olderThan)
			if err != nil {
				return err
			}
			sts, err := parseStatuses(statuses, []queue.Status{queue.StatusCompleted, queue.StatusFailed, queue.StatusCancelled}, map[queue.Status]string{
				queue.StatusWaiting:   "waiting tasks are never purged (cancel them first)",
				queue.StatusScheduled: "scheduled tasks are never purged (cancel them first)",
				queue.StatusPending:   "pending tasks are never purged (cancel them first)",
				queue.StatusRetrying:  "retrying tasks are never purged (cancel them first)",
				queue.StatusRunning:   "running tasks are never purged",
			})
			if err != nil {
				return err
			}
			if len(sts) == 0 {
				sts = []queue.Status{queue.StatusCompleted, queue.StatusFailed, queue.StatusCancelled}
			}
			before := time.Now().Add(-age)
			f := queue.Filter{Statuses: sts, Queues: queues, Names: names, FinishedBefore: before}
			req := queue.PurgeRequest{Filter: f, BatchSize: int(bf.batch)}
			client, done, err := bf.open(cmd.Context(), a, req.Validate())
			if err != nil {
				return err
			}
			defer done()
			if window := queue.StatsWindows[len(queue.StatsWindows)-1]; age < window && !bf.dryRun {
				fmt.Fprintf(a.env.Stderr, "skiplock: purge: note: this deletes tasks that finished in the last %s; "+
					"stats' rates and the dashboard's charts count stored tasks, so they will read low\n", short(window))
			}
			return a.changeBulk(cmd.Context(), shardSet{{client: client, pool: a.pool}}, bulk{
				action: "purge", past: "purged", dryRun: bf.dryRun, yes: bf.yes, limit: int(bf.limit),
				filter: f,
				run: func(ctx context.Context, client *queue.Client, progress func(int64)) (int64, error) {
					req.Progress = progress
					res, err := client.Purge(ctx, req)
					return res.Changed, err
				},
			})
		},
	})
	fl := c.Flags()
	fl.StringVar(&olderThan, "older-than", "168h", "delete tasks that finished longer ago than this (e.g. 72h, 30d)")
	fl.StringSliceVar(&statuses, "status", nil, "only tasks in this status: completed, failed, cancelled (default all three)")
	fl.StringArrayVar(&queues, "queue", nil, "only tasks in this queue (repeat for several)")
	fl.StringArrayVar(&names, "name", nil, "only tasks with this name (repeat for several)")
	bf.register(c, defaults.PurgeBatch, "show how many and which tasks would be deleted; delete nothing")
	return c
}

func (a *app) runNowCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:   "run-now ID...",
		Short: "Make scheduled or retrying tasks due now",
		Long: `Make pending tasks that wait for a later run time due now: scheduled ones
(enqueued with a delay or a run time) and retrying ones (waiting out a
retry's backoff). Their workers are woken. Attempts, errors and everything
else are kept.

A named task that is not pending, or not found, is reported, and the exit
code is 3; one already due is fine.`,
		Example: `  skiplock run-now 42
  skiplock list --status retrying --queue mail --json | jq -r '.[].id' | xargs skiplock run-now`,
		Args: atLeastOneID,
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			set, done, err := a.openShards(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			return a.changeByIDs(cmd.Context(), set, byIDs{
				action: "run now", past: "made due now", ids: ids, fine: []queue.Status{queue.StatusPending},
				why: func(s queue.Status) string {
					if s == queue.StatusPending {
						return "already due"
					}
					return string(s) + ", not waiting"
				},
				run: func(ctx context.Context, client *queue.Client, ids []int64) ([]int64, []queue.SkippedTask, error) {
					res, err := client.RunNow(ctx, ids)
					return res.IDs, res.Skipped, err
				},
			})
		},
	})
}

func (a *app) deleteCommand() *cobra.Command {
	var dryRun, yes bool
	c := newCommand(&cobra.Command{
		Use:   "delete ID...",
		Short: "Delete tasks, with their history, unless they are running",
		Long: `Delete the named tasks and their history, whatever their status but
running: a worker holds a running task (cancel it first). Asks for
confirmation (--yes skips it; without a terminal it is required). To delete
finished tasks by age, use purge.

A named task that is running or not found is reported, and the exit code
is 3.`,
		Example: `  skiplock delete 42
  skiplock delete 42 43 --yes`,
		Args: atLeastOneID,
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			set, done, err := a.openShards(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if !dryRun {
				if err := a.confirm(yes, fmt.Sprintf("Delete %s and %s history?", plural(int64(len(ids)), "task", "tasks"),
					map[bool]string{true: "its", false: "their"}[len(ids) == 1])); err != nil {
					return err
				}
			}
			return a.changeByIDs(cmd.Context(), set, byIDs{
				action: "delete", past: "deleted", ids: ids, dryRun: dryRun,
				why: func(s queue.Status) string {
					if s == queue.StatusRunning {
						return "running, not deleted (cancel it first)"
					}
					return string(s) + ", not deleted"
				},
				run: func(ctx context.Context, client *queue.Client, ids []int64) ([]int64, []queue.SkippedTask, error) {
					res, err := client.Delete(ctx, ids)
					return res.IDs, res.Skipped, err
				},
				runTx: func(ctx context.Context, client *queue.Client, tx queue.Executor, ids []int64) ([]int64, []queue.SkippedTask, error) {
					res, err := client.DeleteTx(ctx, tx, ids)
					return res.IDs, res.Skipped, err
				},
			})
		},
	})
	c.Flags().BoolVar(&dryRun, "dry-run", false, "show which tasks would be deleted; delete nothing")
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return c
}

// atLeastOneID wants task IDs as arguments.
func atLeastOneID(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageErrorf("name at least one task ID (see `%s --help`)", cmd.CommandPath())
	}
	return nil
}
