// Package bench measures skiplock on a real PostgreSQL server: how fast a
// worker with default settings works a backlog, how fast tasks can be
// enqueued, how long an idle worker takes to start a task, how it holds up
// under a sustained load, and how it scales across processes. It is the
// logic of cmd/skiplock-bench:
//
//	err := bench.Run(ctx, bench.Options{Workloads: []string{"throughput"}, Runs: 3}, os.Stdout)
//
// Every run gets a fresh schema that the bench creates, migrates and drops,
// so runs do not see each other's rows and nothing is left behind. Worker
// processes for the throughput, scaling and sustained workloads are the
// bench binary itself, started again in a hidden mode (WorkerProcessFlag),
// so that what is measured is a real process with default settings.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/cpustat"
)

// Workload names, in the order Run runs them.
const (
	WorkloadThroughput    = "throughput"
	WorkloadWorkflow      = "workflow"
	WorkloadBurst         = "burst"
	WorkloadEnqueueCopy   = "enqueue-copy"
	WorkloadEnqueueSingle = "enqueue-single"
	WorkloadLatency       = "latency"
	WorkloadScaling       = "scaling"
	WorkloadSustained     = "sustained"
	WorkloadPinned        = "pinned"
	WorkloadGated         = "gated"
	WorkloadBulk          = "bulk"
	WorkloadRateKey       = "rate-key"
)

// Workloads lists every workload in run order.
var Workloads = []string{WorkloadThroughput, WorkloadWorkflow, WorkloadBurst, WorkloadEnqueueCopy, WorkloadEnqueueSingle, WorkloadLatency, WorkloadScaling, WorkloadGated, WorkloadBulk, WorkloadRateKey, WorkloadSustained, WorkloadPinned}

// DefaultWorkloads are the workloads run when none are named: all but
// sustained and pinned, which take minutes, and workflow, which measures a
// feature rather than the claim.
var DefaultWorkloads = []string{WorkloadThroughput, WorkloadBurst, WorkloadEnqueueCopy, WorkloadEnqueueSingle, WorkloadLatency, WorkloadScaling}

// Defaults of Options.
const (
	DefaultTasks           = 100_000
	DefaultRuns            = 1
	DefaultProducers       = 16
	DefaultEnqueueDuration = 10 * time.Second
	DefaultLatencyRate     = 100
	DefaultLatencyDuration = 20 * time.Second
	DefaultSustainedRate   = 5000
	DefaultDuration        = 2 * time.Minute
	DefaultPin             = 4 * time.Minute
	DefaultWorkflowSize    = 100
	DefaultGatedWork       = 36 * time.Millisecond
	DefaultGatedTasks      = 300
)

// Options selects and sizes the workloads. The zero value runs
// DefaultWorkloads once against DATABASE_URL or a local server.
type Options struct {
	// DatabaseURL is the server to run on. Defaults to DATABASE_URL, then
	// a local server on 127.0.0.1:5432, then a throwaway cluster (see
	// internal/testinfra/devpg).
	DatabaseURL string
	// Workloads to run, from Workloads. Defaults to DefaultWorkloads.
	Workloads []string
	// Runs is how many times each case runs; the report shows the median.
	// Defaults to 1.
	Runs int
	// Tasks is the backlog of the throughput, workflow and bulk workloads
	// (one case per value) and of enqueue-copy; scaling uses the first
	// value.
	// Defaults to [100000].
	Tasks []int
	// Mode is the worker's Config.Mode: "advisory" (the default) or
	// "lease".
	Mode string
	// Concurrency is the worker's Config.Concurrency for throughput,
	// workflow and scaling, one case per value; 0 keeps the worker's default (100).
	// Defaults to [0].
	Concurrency []int
	// Limits are cluster-wide concurrency limits for the throughput
	// workload, one case per value: before the workers start, the bench's
	// queue gets a queue.Limit with this Max (Client.SetLimit). 0 sets
	// none. Defaults to [0].
	Limits []int
	// Shards, when set, makes the throughput workload work its backlog in
	// fresh databases instead of a fresh schema, one case per value: 0 is
	// the plain baseline (one database, queue.Client and worker.New), n is
	// n databases stamped 1..n (migrations.SetShard), the backlog spread
	// evenly through a queue.ShardedClient and worked by one worker process
	// running worker.NewSharded over them. Each database is created,
	// migrated and dropped by the run.
	Shards []int
	// ShardServers are the server URLs the databases of Shards are created
	// on, shard i on server (i-1) mod len; the connecting role needs
	// CREATEDB. Defaults to DatabaseURL's server.
	ShardServers []string
	// WorkflowSize is how many tasks each workflow of the workflow workload
	// has: a root, WorkflowSize-2 tasks that depend on it (fan-out) and a
	// final task that depends on all of those (fan-in). Every value of
	// Tasks must be a multiple of it. Defaults to 100.
	WorkflowSize int
	// Procs are the worker process counts of the scaling workload.
	// Defaults to [1, 2].
	Procs []int
	// Producers is how many goroutines call Enqueue at once in
	// enqueue-single. Defaults to 16.
	Producers int
	// PoolConns sizes the producers' pool in enqueue-single. Defaults to
	// Producers, one connection each; pgxpool's own default would be
	// max(4, CPUs).
	PoolConns int
	// EnqueueDuration is how long enqueue-single runs. Defaults to 10s.
	EnqueueDuration time.Duration
	// Rates are the enqueue rates of the latency workload, tasks per
	// second, one case per value. Defaults to [100].
	Rates []float64
	// LatencyDuration is how long each latency case enqueues. Defaults to
	// 20s.
	LatencyDuration time.Duration
	// SustainedRate is the enqueue rate of the sustained workload, tasks
	// per second. Defaults to 5000.
	SustainedRate float64
	// Duration is how long the sustained workload runs. Defaults to 2m.
	Duration time.Duration
	// Pin is how long the pinned workload holds the xmin horizon back
	// (a session idle in transaction); it offers SustainedRate. Defaults
	// to 4m.
	Pin time.Duration
	// Purge, when positive, makes the sustained workload purge completed
	// tasks older than Purge every Purge, as an operator's scheduled
	// `skiplock purge` would: skiplock keeps finished tasks until purged.
	Purge time.Duration
	// Vacuum runs VACUUM ANALYZE after a backlog is preloaded, before the
	// workers start: statistics collected, hint bits set, visibility map
	// current, as for a backlog that built up over hours. Off by default:
	// a burst that has just arrived is worked unvacuumed, and that is how
	// the peers are measured. Cases run with it are labelled "vacuumed".
	Vacuum bool
	// Trace times every statement of the worker processes (a pgx tracer)
	// and adds per-statement rows to the throughput and scaling results.
	Trace bool
	// DeleteCompleted sets the throughput workers' Config.DeleteCompleted:
	// the tasks they complete are deleted, not kept.
	DeleteCompleted bool
	// WorkerSettings are server settings ("synchronous_commit=off") SET on
	// every connection of the worker processes, and LockSessionSettings on
	// their lock sessions only: experiments, not defaults.
	WorkerSettings      []string
	LockSessionSettings []string
	// SchemaSQL runs on every fresh schema after migrating it, with the
	// schema first in search_path: experiments on the schema, such as
	// dropping an index or disabling the insert trigger.
	SchemaSQL string
	// WaitQuiet, when positive, makes each run wait (up to this long) until
	// the machine has been nearly idle for a second, and discards and
	// repeats a run during which other processes used more than a tenth of
	// the CPU, so that other work on a shared machine does not skew the
	// numbers. Every run reports the share other processes took.
	WaitQuiet time.Duration
	// GatedWork are the handler times of the gated workload's tasks, one
	// pair of cases (limit, exclusive keys) per value: the shorter the
	// task, the larger the share of a place's time that its hand-off
	// takes. Defaults to [DefaultGatedWork].
	GatedWork []time.Duration
	// GatedTasks are the gated workload's backlogs, one set of cases each:
	// the tasks that wait behind a running exclusive key are pending, and
	// a claim reads past them. Defaults to [DefaultGatedTasks].
	GatedTasks []int
	// RateKeyBacklog is the rate-key workload's backlog per key. Defaults
	// to DefaultRateKeyBacklog (200: 20 one-second windows at 10 per key).
	RateKeyBacklog int
	// JSON prints the report as JSON instead of a table.
	JSON bool
	// SVGDir, when set, receives charts of the results as SVG files.
	SVGDir string
	// CPUProfile, when set, is where the worker process of the first
	// throughput run writes its CPU profile.
	CPUProfile string
	// Self is the command line that reaches the bench, used to start worker
	// processes (WorkerProcessFlag is appended). Defaults to this
	// executable alone; a bench mounted as `skiplock bench` passes
	// [executable, "bench"].
	Self []string
	// Progress receives a status line while the bench runs (os.Stderr in
	// the command). Nil means silent.
	Progress io.Writer
	// schemaMade, when set, is told the name of every schema the run
	// creates (the tests check that each is dropped, whatever else runs on
	// the server).
	schemaMade func(name string)
	// databaseMade, when set, is told the name of every database the run
	// creates (Shards).
	databaseMade func(name string)
}

func (o Options) withDefaults() (Options, error) {
	if len(o.Workloads) == 0 {
		o.Workloads = DefaultWorkloads
	}
	if o.Runs == 0 {
		o.Runs = DefaultRuns
	}
	if len(o.Tasks) == 0 {
		o.Tasks = []int{DefaultTasks}
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{0}
	}
	if len(o.Limits) == 0 {
		o.Limits = []int{0}
	}
	if o.WorkflowSize == 0 {
		o.WorkflowSize = DefaultWorkflowSize
	}
	if len(o.Procs) == 0 {
		o.Procs = []int{1, 2}
	}
	if o.Producers == 0 {
		o.Producers = DefaultProducers
	}
	if o.PoolConns == 0 {
		o.PoolConns = o.Producers
	}
	if o.EnqueueDuration == 0 {
		o.EnqueueDuration = DefaultEnqueueDuration
	}
	if len(o.Rates) == 0 {
		o.Rates = []float64{DefaultLatencyRate}
	}
	if o.LatencyDuration == 0 {
		o.LatencyDuration = DefaultLatencyDuration
	}
	if o.SustainedRate == 0 {
		o.SustainedRate = DefaultSustainedRate
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.Pin == 0 {
		o.Pin = DefaultPin
	}
	if o.RateKeyBacklog == 0 {
		o.RateKeyBacklog = DefaultRateKeyBacklog
	}
	if len(o.GatedWork) == 0 {
		o.GatedWork = []time.Duration{DefaultGatedWork}
	}
	if len(o.GatedTasks) == 0 {
		o.GatedTasks = []int{DefaultGatedTasks}
	}
	if len(o.Self) == 0 {
		exe, err := os.Executable()
		if err != nil {
			exe = os.Args[0]
		}
		o.Self = []string{exe}
	}

	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("bench: "+format, args...))
		}
	}
	for _, w := range o.Workloads {
		check(slices.Contains(Workloads, w), "unknown workload %q (choose from %s)", w, strings.Join(Workloads, ", "))
	}
	check(o.Mode == "" || o.Mode == "advisory" || o.Mode == "lease", "mode must be advisory or lease, got %q", o.Mode)
	check(o.Runs > 0, "runs must be positive, got %d", o.Runs)
	for _, n := range o.Tasks {
		check(n > 0, "tasks must be positive, got %d", n)
	}
	for _, n := range o.Concurrency {
		check(n >= 0, "concurrency must not be negative, got %d", n)
	}
	for _, n := range o.Limits {
		check(n >= 0 && n <= 1<<30, "limit must be 0 (none) to %d, got %d", 1<<30, n)
	}
	check(o.WorkflowSize >= 3, "workflow size must be at least 3 (root, fan-out, fan-in), got %d", o.WorkflowSize)
	if slices.Contains(o.Workloads, WorkloadWorkflow) && o.WorkflowSize >= 3 {
		for _, n := range o.Tasks {
			check(n%o.WorkflowSize == 0, "workflow: tasks (%d) must be a multiple of the workflow size (%d)", n, o.WorkflowSize)
		}
	}
	for _, n := range o.Shards {
		check(n >= 0 && n <= 32767, "shards must be 0 (plain) to 32767, got %d", n)
	}
	check(len(o.Shards) == 0 || slices.Contains(o.Workloads, WorkloadThroughput), "shards apply to the throughput workload, which is not selected")
	check(len(o.ShardServers) == 0 || len(o.Shards) > 0, "shard servers given without shards")
	check(len(o.Shards) == 0 || (!o.Trace && o.CPUProfile == "" && !slices.ContainsFunc(o.Limits, func(n int) bool { return n != 0 })),
		"shards cannot be combined with trace, cpuprofile or limit")
	for _, n := range o.Procs {
		check(n > 0, "procs must be positive, got %d", n)
	}
	check(o.Producers > 0, "producers must be positive, got %d", o.Producers)
	for _, d := range o.GatedWork {
		check(d > 0, "gated work must be positive, got %s", d)
	}
	for _, n := range o.GatedTasks {
		check(n >= gatedSlots, "gated tasks must be at least %d, got %d", gatedSlots, n)
	}
	check(o.RateKeyBacklog > 0, "rate-key backlog must be positive, got %d", o.RateKeyBacklog)
	check(o.PoolConns > 0, "pool connections must be positive, got %d", o.PoolConns)
	check(o.EnqueueDuration > 0, "enqueue duration must be positive, got %s", o.EnqueueDuration)
	for _, r := range o.Rates {
		check(r > 0, "rate must be positive, got %g", r)
	}
	check(o.LatencyDuration > 0, "latency duration must be positive, got %s", o.LatencyDuration)
	check(o.SustainedRate > 0, "sustained rate must be positive, got %g", o.SustainedRate)
	check(o.Duration > 0, "duration must be positive, got %s", o.Duration)
	check(o.Pin > 0, "pin must be positive, got %s", o.Pin)
	check(o.Purge >= 0, "purge interval must not be negative, got %s", o.Purge)
	for _, s := range append(slices.Clone(o.WorkerSettings), o.LockSessionSettings...) {
		name, _, ok := strings.Cut(s, "=")
		check(ok && name != "", "setting %q is not name=value", s)
	}
	return o, errors.Join(errs...)
}

// Report is what a bench run found; Run prints it as a table or as JSON.
type Report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  Machine   `json:"machine"`
	// Load is the machine's load average when the bench started: other
	// work on the machine skews every number.
	Load string `json:"load_average,omitempty"`
	Runs int    `json:"runs"`
	// Mode is the worker mode, advisory or lease.
	Mode string `json:"mode,omitempty"`
	// The experiments applied to the schema and the worker's connections,
	// if any.
	SchemaSQL           string   `json:"schema_sql,omitempty"`
	DeleteCompleted     bool     `json:"delete_completed,omitempty"`
	WorkerSettings      []string `json:"worker_settings,omitempty"`
	LockSessionSettings []string `json:"lock_session_settings,omitempty"`
	Results             []Result `json:"results"`
	// Discarded counts runs repeated because other processes disturbed
	// them (Options.WaitQuiet).
	Discarded int `json:"discarded_runs,omitempty"`
	// Sustained holds the samples of the last sustained run.
	Sustained []SustainedSample `json:"sustained,omitempty"`
}

// Result is one metric of one case: the median of its runs.
type Result struct {
	Workload string             `json:"workload"`
	Case     string             `json:"case"`
	Params   map[string]float64 `json:"params,omitempty"`
	Metric   string             `json:"metric"`
	Unit     string             `json:"unit"`
	Median   float64            `json:"median"`
	Runs     []float64          `json:"runs"`
	// Target is the goal from the issue, such as ">= 36000"; Pass says
	// whether the median meets it.
	Target string `json:"target,omitempty"`
	Pass   *bool  `json:"pass,omitempty"`
}

// target is a goal a metric's median is held to.
type target struct {
	atLeast bool
	v       float64
}

func (t target) String() string {
	if t.atLeast {
		return ">= " + formatNumber(t.v)
	}
	return "<= " + formatNumber(t.v)
}

func (t target) met(v float64) bool {
	if t.atLeast {
		return v >= t.v
	}
	return v <= t.v
}

// measure is one metric of one run.
type measure struct {
	metric string
	unit   string
	value  float64
	target *target
}

// bencher runs the workloads of one Run.
type bencher struct {
	opts   Options
	env    *env
	prog   *progress
	report *Report
	// profiled is set once the CPU profile has been written.
	profiled bool
}

// Run runs the selected workloads and writes the report to w. Progress goes
// to opts.Progress. It returns the first error that stops a workload; the
// results gathered so far are still printed.
func Run(ctx context.Context, opts Options, w io.Writer) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	b := &bencher{opts: opts, prog: newProgress(opts.Progress), report: &Report{Started: time.Now(), Runs: opts.Runs, Mode: opts.Mode,
		SchemaSQL: opts.SchemaSQL, DeleteCompleted: opts.DeleteCompleted, WorkerSettings: opts.WorkerSettings, LockSessionSettings: opts.LockSessionSettings}}
	b.env, err = openEnv(ctx, opts, b.prog)
	if err == nil {
		b.env.schemaSQL = opts.SchemaSQL
		b.env.schemaMade = opts.schemaMade
	}
	if err != nil {
		return err
	}
	defer b.env.close()
	if err := b.env.sweep(ctx); err != nil {
		return fmt.Errorf("bench: sweeping old schemas: %w", err)
	}
	b.env.findPostmaster(ctx)
	if b.report.Machine, err = b.env.machine(ctx); err != nil {
		return fmt.Errorf("bench: reading server settings: %w", err)
	}
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.report.Load = strings.Join(strings.Fields(string(l))[:3], " ")
	}

	runs := map[string]func(context.Context) error{
		WorkloadThroughput:    b.backlogs,
		WorkloadWorkflow:      b.backlogs,
		WorkloadBurst:         b.burst,
		WorkloadEnqueueCopy:   b.enqueueCopy,
		WorkloadEnqueueSingle: b.enqueueSingle,
		WorkloadLatency:       b.latency,
		WorkloadScaling:       b.scaling,
		WorkloadSustained:     b.sustained,
		WorkloadPinned:        b.pinned,
		WorkloadGated:         b.gated,
		WorkloadBulk:          b.bulk,
		WorkloadRateKey:       b.rateKey,
	}
	for _, name := range Workloads {
		if !slices.Contains(opts.Workloads, name) {
			continue
		}
		label := name
		if name == WorkloadThroughput && slices.Contains(opts.Workloads, WorkloadWorkflow) {
			// backlogs ran both, their runs alternating.
			label = WorkloadThroughput + ", " + WorkloadWorkflow
		} else if name == WorkloadWorkflow && slices.Contains(opts.Workloads, WorkloadThroughput) {
			continue
		}
		if err = runs[name](ctx); err != nil {
			err = fmt.Errorf("bench: %s: %w", label, err)
			break
		}
	}
	b.prog.clear()
	b.report.Finished = time.Now()
	if opts.SVGDir != "" {
		if cerr := b.writeCharts(); cerr != nil {
			err = fmt.Errorf("bench: writing charts: %w", cerr)
		}
	}
	if perr := b.print(w); perr != nil && err == nil {
		err = perr
	}
	return err
}

// benchCase is one case of a workload; run measures it once.
type benchCase struct {
	workload, name string
	params         map[string]float64
	run            func(ctx context.Context, run int) ([]measure, error)
}

// repeat runs one case Runs times and records the median of each metric.
func (b *bencher) repeat(ctx context.Context, workload, name string, params map[string]float64, fn func(ctx context.Context, run int) ([]measure, error)) error {
	return b.alternate(ctx, []benchCase{{workload: workload, name: name, params: params, run: fn}})
}

// alternate runs every case Runs times, round by round (the first run of
// each case, then the second of each, ...), so that a machine whose speed
// drifts, as a shared one does, skews the cases alike. It records the median
// of each metric of a case once all its runs are done.
func (b *bencher) alternate(ctx context.Context, cases []benchCase) error {
	type tally struct {
		order  []string
		values map[string][]float64
		first  map[string]measure
	}
	tallies := make([]tally, len(cases))
	for i := range tallies {
		tallies[i] = tally{values: map[string][]float64{}, first: map[string]measure{}}
	}
	for run := range b.opts.Runs {
		for i, c := range cases {
			ms, err := b.runOnce(ctx, c, run)
			if err != nil {
				return err
			}
			t := &tallies[i]
			for _, m := range ms {
				if _, ok := t.first[m.metric]; !ok {
					t.first[m.metric] = m
					t.order = append(t.order, m.metric)
				}
				t.values[m.metric] = append(t.values[m.metric], m.value)
			}
			if run < b.opts.Runs-1 {
				continue
			}
			for _, metric := range t.order {
				m := t.first[metric]
				r := Result{Workload: c.workload, Case: c.name, Params: c.params, Metric: metric, Unit: m.unit,
					Median: median(t.values[metric]), Runs: t.values[metric]}
				if m.target != nil {
					r.Target = m.target.String()
					pass := m.target.met(r.Median)
					r.Pass = &pass
				}
				b.report.Results = append(b.report.Results, r)
			}
			b.prog.logf("%s %s: %s", c.workload, c.name, summary(b.report.Results, c.workload, c.name))
		}
	}
	return nil
}

// runOnce runs a case once; with WaitQuiet, it waits for a quiet machine
// first and repeats a run that other processes disturbed.
func (b *bencher) runOnce(ctx context.Context, c benchCase, run int) ([]measure, error) {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := b.waitQuiet(ctx, c.name); err != nil {
			return nil, err
		}
		noise := newNoiseProbe(b.env.postmaster)
		ms, err := c.run(ctx, run)
		if err != nil {
			return nil, fmt.Errorf("%s, run %d: %w", c.name, run+1, err)
		}
		share := noise.share()
		ms = append(ms, measure{metric: "other processes", unit: "% of CPU", value: 100 * share})
		if b.opts.WaitQuiet <= 0 || share < disturbed || attempt == maxAttempts {
			return ms, nil
		}
		b.report.Discarded++
		b.prog.logf("%s%s: other processes used %.0f%% of the CPU during the run; discarding it and running again",
			c.name, runLabel(run, b.opts.Runs), 100*share)
	}
}

// With WaitQuiet, a run during which other processes used more than
// disturbed of the machine's CPU is discarded and run again, up to
// maxAttempts times.
const (
	disturbed   = 0.10
	maxAttempts = 6
)

// quietBusy is the share of the machine's CPU that counts as idle enough
// to start a run: PostgreSQL's background processes and the odd daemon.
const quietBusy = 0.08

// waitQuiet waits, up to Options.WaitQuiet, for a second in which the
// machine was busy less than quietBusy.
func (b *bencher) waitQuiet(ctx context.Context, name string) error {
	if b.opts.WaitQuiet <= 0 {
		return nil
	}
	deadline := time.Now().Add(b.opts.WaitQuiet)
	for {
		before := cpustat.MachineBusy()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		busy := (cpustat.MachineBusy() - before).Seconds() / float64(runtime.NumCPU())
		if busy < quietBusy {
			return nil
		}
		if time.Now().After(deadline) {
			b.prog.logf("%s: machine still %.0f%% busy after waiting %s; running anyway", name, 100*busy, b.opts.WaitQuiet)
			return nil
		}
		b.prog.status("%s: waiting for a quiet machine (%.0f%% busy)", name, 100*busy)
	}
}

// summary is the one line logged after a case: its first metrics.
func summary(results []Result, workload, name string) string {
	var parts []string
	for _, r := range results {
		if r.Workload == workload && r.Case == name && len(parts) < 4 {
			parts = append(parts, fmt.Sprintf("%s %s %s", r.Metric, formatNumber(r.Median), r.Unit))
		}
	}
	return strings.Join(parts, ", ")
}

func runLabel(run, runs int) string {
	if runs == 1 {
		return ""
	}
	return fmt.Sprintf(" run %d/%d", run+1, runs)
}

// concurrencyOf resolves 0 to the worker's default on a local network,
// 500 (worker.Config.Concurrency: left at zero, the worker sizes it by the
// round trip to the server, from 500 up).
func concurrencyOf(c int) int {
	if c == 0 {
		return 500
	}
	return c
}

func (b *bencher) writeCharts() error {
	if err := os.MkdirAll(b.opts.SVGDir, 0o755); err != nil {
		return err
	}
	for name, c := range b.charts() {
		f, err := os.Create(filepath.Join(b.opts.SVGDir, name))
		if err != nil {
			return err
		}
		err = c.WriteSVG(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		b.prog.logf("wrote %s", filepath.Join(b.opts.SVGDir, name))
	}
	return nil
}

func (b *bencher) print(w io.Writer) error {
	if b.opts.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(b.report)
	}
	return b.report.writeTable(w)
}

// progressOut is where worker logs go: with the progress line.
func (b *bencher) progressOut() io.Writer {
	if b.opts.Progress == nil {
		return io.Discard
	}
	// One write at a time, with the status line's and the worker
	// processes' (lockedWriter).
	return lockedWriter{w: b.opts.Progress}
}
