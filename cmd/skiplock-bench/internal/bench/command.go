package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const usage = `Usage: skiplock-bench [flags]

Measures skiplock against a PostgreSQL server with default worker settings:
work throughput, bulk and single enqueue, idle latency, scaling across
processes and a sustained load. Each run uses a fresh schema that is
created, migrated and dropped. Progress goes to stderr, the report to
stdout.

Examples:
  skiplock-bench compare -help                     # side by side with River, Graphile Worker, the bare SQL cycle
  PEER_N=50000 PEER_DSN=... skiplock-bench --peer-line   # skiplock's line of skiplock-bench compare
  skiplock-bench                                   # default workloads, once
  skiplock-bench --runs 3 --workload throughput --tasks 100000,1000000
  skiplock-bench --runs 3 --workload throughput --tasks 100000 --limit 0,1000000   # without and with a limit
  skiplock-bench --runs 3 --workload throughput,workflow --tasks 100000            # 1,000 workflows of 100
  skiplock-bench --runs 2 --workload throughput --tasks 50000 --shards 0,1,2,3   # plain, then over 1, 2, 3 shards
  skiplock-bench --workload scaling --procs 1,2,4 --concurrency 10,100,1000 --svg docs
  skiplock-bench --workload latency --rate 50,500 --json
  skiplock-bench --workload sustained --duration 10m --rate-sustained 5000
  skiplock-bench --workload pinned --pin 4m --rate-sustained 5000

Workloads: throughput, workflow, burst, enqueue-copy, enqueue-single,
latency, scaling, gated, bulk, rate-key, sustained and pinned. Not run
unless named: workflow (throughput with the backlog made of workflows: a
root, --workflow-size minus 2 tasks depending on it, a final task depending
on all of those), gated (300 tasks, or each --gated-tasks, of 36 ms, or of each --gated-work, under a
cluster-wide limit of 3, then under 3 exclusive keys, worked by 3 workers:
how fast a freed place is taken), bulk (--tasks tasks that each insert a row, by a handler per task
with a one-row INSERT, then by a bulk handler of 100 with one multi-row
INSERT), rate-key (--rate-key-backlog tasks for each of 5 keys under a
per-key rate limit of 10/s, worked by 3 worker processes: the rate each key
gets), sustained and pinned (they take minutes; pinned holds the server's xmin
horizon back for --pin, so give it a server of its own). With --shards,
throughput works its backlog in fresh databases, one case per shard count
(0: the plain baseline). With --runs > 1,
the runs of the throughput and workflow cases alternate, so that a shared
machine's drift skews them alike.

Flags:
`

// Command is the bench's command line: it parses args (without the program
// name), runs the bench and returns the exit code. self is the command line
// that reaches Command again, used to start worker processes: nil for this
// executable alone (skiplock-bench), or [executable, "bench"] for a
// subcommand.
func Command(ctx context.Context, self, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == WorkerProcessFlag {
		if err := workerProcess(ctx, os.Stdin, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "skiplock-bench worker: %v\n", err)
			return 1
		}
		return 0
	}

	fs := flag.NewFlagSet("skiplock-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	var o Options
	workloads := fs.String("workload", strings.Join(DefaultWorkloads, ","), "comma-separated `workloads` to run")
	tasks := fs.String("tasks", strconv.Itoa(DefaultTasks), "backlog `sizes` for throughput, workflow and enqueue-copy, comma-separated (scaling uses the first)")
	conc := fs.String("concurrency", "0", "worker Concurrency `values` for throughput, workflow and scaling, comma-separated; 0 is the default (sized by the round trip, 500 on a local network)")
	procs := fs.String("procs", "1,2", "worker process `counts` for scaling, comma-separated")
	limits := fs.String("limit", "0", "throughput: cluster-wide concurrency `limits` (queue.SetLimit on the bench's queue, before the workers start), comma-separated; 0 sets none")
	shards := fs.String("shards", "", "throughput over shards: shard `counts`, comma-separated, one case each, their runs alternating; each case works the backlog in fresh databases (created, migrated, dropped): 0 is the plain baseline (one database, queue.Client and worker.New), n is n databases stamped 1..n, the backlog spread evenly through a queue.ShardedClient and worked by one worker process running worker.NewSharded")
	shardServers := fs.String("shard-servers", "", "with --shards: server `URLs`, comma-separated, to create the shards' databases on (shard i on server (i-1) mod count; needs CREATEDB); default: the --database-url server")
	fs.IntVar(&o.WorkflowSize, "workflow-size", DefaultWorkflowSize, "workflow: tasks per workflow; --tasks must be a multiple of it")
	settings := fs.String("worker-setting", "", "experiment: `name=value,...` server settings SET on every worker connection")
	lockSettings := fs.String("lock-session-setting", "", "experiment: `name=value,...` server settings SET on the worker's lock session only")
	rates := fs.String("rate", strconv.Itoa(DefaultLatencyRate), "latency enqueue `rates` in tasks/s, comma-separated")
	fs.StringVar(&o.DatabaseURL, "database-url", "", "PostgreSQL `URL`; defaults to DATABASE_URL, then a local server, then a throwaway cluster")
	fs.StringVar(&o.Mode, "mode", "advisory", "worker `mode`: advisory or lease")
	fs.IntVar(&o.Runs, "runs", DefaultRuns, "runs of each case; the report shows the median")
	fs.IntVar(&o.Producers, "producers", DefaultProducers, "concurrent producers for enqueue-single")
	fs.IntVar(&o.PoolConns, "pool-conns", 0, "producers' pool size for enqueue-single (default: one per producer)")
	fs.DurationVar(&o.EnqueueDuration, "enqueue-duration", DefaultEnqueueDuration, "how long enqueue-single runs")
	fs.DurationVar(&o.LatencyDuration, "latency-duration", DefaultLatencyDuration, "how long each latency case enqueues")
	fs.Float64Var(&o.SustainedRate, "rate-sustained", DefaultSustainedRate, "enqueue rate of the sustained workload, tasks/s")
	fs.DurationVar(&o.Duration, "duration", DefaultDuration, "how long the sustained workload runs")
	gatedWork := fs.String("gated-work", DefaultGatedWork.String(), "gated: how long each task's handler takes, comma-separated `durations` (10ms,20ms,36ms), one limit case and one exclusive-key case each")
	gatedTasks := fs.String("gated-tasks", strconv.Itoa(DefaultGatedTasks), "gated: tasks per case, comma-separated `counts` (300,3000): the backlog a claim reads past while keys are taken")
	fs.IntVar(&o.RateKeyBacklog, "rate-key-backlog", DefaultRateKeyBacklog, "rate-key: tasks per key (5 keys, a limit of 10/s per key, 3 worker processes)")
	fs.DurationVar(&o.Pin, "pin", DefaultPin, "pinned: how long another session holds the xmin horizon back (idle in transaction) while --rate-sustained is offered")
	fs.DurationVar(&o.Purge, "purge", 0, "sustained: every `interval`, purge completed tasks older than it (as a scheduled skiplock purge would)")
	fs.BoolVar(&o.Vacuum, "vacuum", false, "run VACUUM ANALYZE after preloading a backlog, before the workers start (cases are labelled vacuumed); off by default, as for a burst that has just arrived")
	noVacuum := fs.Bool("no-vacuum", false, "no VACUUM between preloading and work: the default now; kept for old command lines")
	fs.BoolVar(&o.Trace, "trace", false, "time the worker's statements (claim, finish, unlock) and report them")
	fs.BoolVar(&o.DeleteCompleted, "delete-completed", false, "throughput: workers with Config.DeleteCompleted (completed tasks deleted, not kept)")
	fs.StringVar(&o.SchemaSQL, "schema-sql", "", "experiment: `SQL` to run on every fresh schema after migrating it (with --peer-line, on its database once migrated)")
	fs.DurationVar(&o.WaitQuiet, "wait-quiet", 0, "before each run, wait up to this long for an idle machine (for shared machines)")
	fs.BoolVar(&o.JSON, "json", false, "print the report as JSON")
	fs.StringVar(&o.SVGDir, "svg", "", "write charts of the results as SVG files into `dir`")
	peerLine := fs.Bool("peer-line", false, "skiplock's line of skiplock-bench compare (and of its -also commands): PEER_N tasks into the fresh database PEER_DSN, worked by one worker; prints work_per_s=N")
	peerEnqueue := fs.String("peer-enqueue", PeerEnqueueMany, "with --peer-line: how the backlog is enqueued, `many` (EnqueueMany) or single (16 producers calling Enqueue)")
	peerConcurrency := fs.Int("peer-concurrency", 0, "with --peer-line: the worker's Concurrency (0: the default), for comparing settings side by side with -also")
	peerClaimBatch := fs.Int("peer-claim-batch", 0, "with --peer-line: the worker's ClaimBatch (0: the default)")
	peerDeleteCompleted := fs.Bool("peer-delete-completed", false, "with --peer-line: the worker's DeleteCompleted (completed tasks deleted, not kept)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write the CPU profile of the first throughput worker process to `file`")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "skiplock-bench: unexpected argument %q (see --help)\n", fs.Arg(0))
		return 2
	}
	if *noVacuum && o.Vacuum {
		fmt.Fprintln(stderr, "skiplock-bench: --vacuum and --no-vacuum contradict each other")
		return 2
	}
	if *peerLine {
		if err := PeerLine(ctx, PeerOptions{Enqueue: *peerEnqueue, Concurrency: *peerConcurrency, ClaimBatch: *peerClaimBatch, DeleteCompleted: *peerDeleteCompleted, SchemaSQL: o.SchemaSQL}, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "skiplock-bench: %v\n", err)
			return 1
		}
		return 0
	}
	var err error
	o.Workloads = splitList(*workloads)
	o.WorkerSettings, o.LockSessionSettings = splitList(*settings), splitList(*lockSettings)
	o.ShardServers = splitList(*shardServers)
	if o.Tasks, err = intList(*tasks); err == nil {
		if o.Concurrency, err = intList(*conc); err == nil {
			if o.Procs, err = intList(*procs); err == nil {
				if o.Limits, err = intList(*limits); err == nil {
					if o.Rates, err = floatList(*rates); err == nil {
						if o.Shards, err = intList(*shards); err == nil {
							if o.GatedWork, err = durationList(*gatedWork); err == nil {
								o.GatedTasks, err = intList(*gatedTasks)
							}
						}
					}
				}
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "skiplock-bench: %v\n", err)
		return 2
	}
	if o.CPUProfile != "" {
		// The worker process may run in another directory one day; give it
		// a path that does not depend on that.
		if abs, err := filepath.Abs(o.CPUProfile); err == nil {
			o.CPUProfile = abs
		}
	}
	o.Self = self
	o.Progress = stderr
	if _, err := o.withDefaults(); err != nil {
		fmt.Fprintf(stderr, "skiplock-bench: %v\n", err)
		return 2
	}
	if err := Run(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "skiplock-bench: %v\n", err)
		return 1
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// intList parses "1,2,100k,1M".
func intList(s string) ([]int, error) {
	fs, err := floatList(s)
	out := make([]int, len(fs))
	for i, f := range fs {
		out[i] = int(f)
	}
	return out, err
}

func durationList(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range splitList(s) {
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (36ms, say)", f)
		}
		out = append(out, d)
	}
	return out, nil
}

func floatList(s string) ([]float64, error) {
	var out []float64
	for _, f := range splitList(s) {
		mult := 1.0
		switch {
		case strings.HasSuffix(f, "k"):
			f, mult = strings.TrimSuffix(f, "k"), 1e3
		case strings.HasSuffix(f, "M"):
			f, mult = strings.TrimSuffix(f, "M"), 1e6
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, v*mult)
	}
	return out, nil
}
