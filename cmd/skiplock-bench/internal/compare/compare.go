// Package compare is `skiplock-bench compare`: skiplock side by side with
// its peers, River and Graphile Worker, and with the bare SQL cycle of a
// SKIP LOCKED + advisory-lock queue, on one PostgreSQL server, in one run.
//
// Every system is measured the same way: N no-op tasks are enqueued before
// any of its workers starts, with no VACUUM in between (a backlog that has
// just arrived has not been vacuumed), and the clock runs from the workers'
// start until every one of the N is durably completed. Each system works in
// an OS process of its own (this binary started again with ChildArg, or
// Node.js for Graphile Worker) on a database created fresh for it; the
// rounds interleave the systems, so that a shared machine's drift skews
// them alike. The table gives each system's best round, every round, and
// skiplock's ratio to it.
package compare

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/bench"
)

// The systems.
const (
	Skiplock = "skiplock"
	River    = "river"
	Graphile = "graphile"
	Cycle    = "cycle"
)

// Systems are the systems the compare knows, in the order it runs them.
var Systems = []string{Skiplock, River, Graphile, Cycle}

// Enqueue paths of skiplock's side (the others bulk-insert always).
const (
	EnqueueMany   = bench.PeerEnqueueMany
	EnqueueSingle = bench.PeerEnqueueSingle
)

// Defaults.
const (
	DefaultN       = 50_000
	DefaultRounds  = 2
	DefaultTimeout = 10 * time.Minute
	DefaultPrefix  = "compare_"
)

// Also is an extra system: a shell command run as skiplock's peer line is,
// with PEER_N and PEER_DSN (a fresh database) in its environment; its rate
// is the last work_per_s=NUMBER, or JSON "work_per_s": NUMBER, it prints.
// It lets an older build of skiplock-bench run side by side:
//
//	-also 'before=/tmp/old-bench --peer-line'
type Also struct {
	Name    string
	Command string
}

// Options configures Run.
type Options struct {
	N      int // tasks per run (DefaultN)
	Rounds int // rounds (DefaultRounds)
	// Enqueue is skiplock's enqueue path: EnqueueMany (default) or
	// EnqueueSingle. -also commands find it in PEER_ENQUEUE.
	Enqueue string
	// Systems to run, of Systems (default: all of them), and extra ones.
	Systems []string
	Also    []Also
	// AdminDSN creates and drops the databases; see AdminDSN for the
	// default.
	AdminDSN string
	// Relay puts every system behind a relay (see Relay) that holds each
	// chunk RelayDelay in each direction; RelayDelay 0 is the relay alone.
	Relay      bool
	RelayDelay time.Duration
	// JSON prints the report as JSON instead of the table.
	JSON bool
	// Timeout bounds each system's run (DefaultTimeout).
	Timeout time.Duration
	// Keep leaves each system's database of the last round in place;
	// otherwise they are dropped at the end.
	Keep bool
	// DBPrefix starts the databases' names (DefaultPrefix): the prefix,
	// then the system's name.
	DBPrefix string
	// Self is the command line that reaches Command, to which the compare
	// appends ChildArg and a system to start a system's process. Default:
	// this executable, "compare".
	Self []string
	// GraphileDir overrides where bench.mjs runs (and npm ci installs).
	GraphileDir string
	// Progress receives progress lines (default: none).
	Progress io.Writer
}

// Report is what Run measured.
type Report struct {
	Conditions Conditions `json:"conditions"`
	Systems    []Result   `json:"systems"`
}

// Conditions are the run's conditions, which the table's header names.
type Conditions struct {
	N          int    `json:"n"`
	Rounds     int    `json:"rounds"`
	Enqueue    string `json:"enqueue"`
	Server     string `json:"server_version"`
	Autovacuum string `json:"autovacuum"`
	// RoundTripMS is the median of 50 SELECT 1 on the systems' path to
	// the server: through the relay when there is one.
	RoundTripMS float64 `json:"round_trip_ms"`
	// Relay is the delay the relay adds each way, "" without a relay.
	Relay    string `json:"relay,omitempty"`
	CPUs     int    `json:"cpus"`
	Go       string `json:"go"`
	River    string `json:"river_version,omitempty"`
	Graphile string `json:"graphile_worker_version,omitempty"`
}

// Result is one system's rates.
type Result struct {
	Name string `json:"system"`
	// Detail says what runs: settings, versions, the command.
	Detail string `json:"detail"`
	// Best is the best round's rate in tasks/s, 0 when every round failed.
	Best float64 `json:"best_per_s"`
	// Rounds are each round's rate, 0 for a round that failed.
	Rounds []float64 `json:"rounds_per_s"`
	// Ratio is skiplock's best over this system's best; 0 when either is
	// missing.
	Ratio float64 `json:"skiplock_ratio,omitempty"`
	// CPU is the CPU per task of the best round's work phase, as the
	// system's process reports it (nil when it reports none).
	CPU *CPU `json:"cpu_us_per_task,omitempty"`
	// Database is the system's database (of the last round).
	Database string   `json:"database"`
	Errors   []string `json:"errors,omitempty"`
}

// CPU is a round's CPU per task while it worked, in microseconds: the
// whole machine's busy time (every process: the system's, the server's,
// anything else running), and, where the system can name its server
// processes, its own process's and theirs.
type CPU struct {
	Machine float64 `json:"machine"`
	Client  float64 `json:"client,omitempty"`
	Server  float64 `json:"server,omitempty"`
	// Split: the system reported Client and Server.
	Split bool `json:"-"`
}

// system is how one column is run.
type system struct {
	name, detail string
	db           string
	// argv and dir start its process; env is added to PEER_N, PEER_DSN
	// and PEER_ENQUEUE.
	argv []string
	dir  string
	env  []string
}

func (o Options) withDefaults() (Options, error) {
	if o.N == 0 {
		o.N = DefaultN
	}
	if o.Rounds == 0 {
		o.Rounds = DefaultRounds
	}
	if o.N < 0 || o.Rounds < 0 {
		return o, errors.New("-n and -rounds must be positive")
	}
	if o.Enqueue == "" {
		o.Enqueue = EnqueueMany
	}
	if o.Enqueue != EnqueueMany && o.Enqueue != EnqueueSingle {
		return o, fmt.Errorf("-enqueue must be %s or %s, got %q", EnqueueMany, EnqueueSingle, o.Enqueue)
	}
	if o.Systems == nil {
		o.Systems = Systems
	}
	for _, s := range o.Systems {
		if !slices.Contains(Systems, s) {
			return o, fmt.Errorf("unknown system %q (the systems are %s)", s, strings.Join(Systems, ", "))
		}
	}
	for _, a := range o.Also {
		if !validName.MatchString(a.Name) || slices.Contains(Systems, a.Name) || strings.TrimSpace(a.Command) == "" {
			return o, fmt.Errorf("-also %q=%q: want NAME=COMMAND, NAME of letters, digits, - and _, not a system's", a.Name, a.Command)
		}
	}
	if len(o.Systems)+len(o.Also) == 0 {
		return o, errors.New("no systems to run")
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.DBPrefix == "" {
		o.DBPrefix = DefaultPrefix
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.RelayDelay < 0 {
		return o, errors.New("-relay-delay must not be negative")
	}
	if o.Self == nil {
		exe, err := os.Executable()
		if err != nil {
			return o, err
		}
		o.Self = []string{exe, "compare"}
	}
	return o, nil
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

// Run runs the compare and prints the table (or JSON) to stdout. It returns
// the report, and an error when a system failed a round (the report and
// the table have the rest) or the compare could not run at all (no report).
func Run(ctx context.Context, o Options, stdout io.Writer) (*Report, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	admin, source, err := AdminDSN(o.AdminDSN)
	if err != nil {
		return nil, err
	}
	base, err := serverURL(admin)
	if err != nil {
		return nil, fmt.Errorf("admin DSN (%s): %w", source, err)
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("connecting to the server (admin DSN from %s): %w", source, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rep := &Report{Conditions: Conditions{N: o.N, Rounds: o.Rounds, Enqueue: o.Enqueue, CPUs: runtime.NumCPU(), Go: runtime.Version()}}
	c := &rep.Conditions
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('autovacuum')").Scan(&c.Server, &c.Autovacuum); err != nil {
		return nil, err
	}

	// The systems' path to the server: through the relay, if asked for.
	if o.Relay {
		network, addr, err := upstream(admin)
		if err != nil {
			return nil, err
		}
		relay, err := StartRelay(network, addr, o.RelayDelay)
		if err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
		defer relay.Close()
		base = throughRelay(base, relay.Addr())
		c.Relay = o.RelayDelay.String()
		fmt.Fprintf(o.Progress, "compare: relay on %s to %s, holding each chunk %s each way\n", relay.Addr(), addr, o.RelayDelay)
	}
	rtt, err := roundTrip(ctx, base.String())
	if err != nil {
		return nil, fmt.Errorf("measuring the round trip: %w", err)
	}
	c.RoundTripMS = float64(rtt.Microseconds()) / 1000

	systems, err := o.systems(c)
	if err != nil {
		return nil, err
	}
	results := make([]Result, len(systems))
	for i, s := range systems {
		results[i] = Result{Name: s.name, Detail: s.detail, Rounds: make([]float64, o.Rounds), Database: s.db}
	}
	fmt.Fprintf(o.Progress, "compare: %d tasks, %d rounds of %s; round trip %.3f ms\n", o.N, o.Rounds, strings.Join(names(systems), ", "), c.RoundTripMS)
	failed := 0
	for r := range o.Rounds {
		var line []string
		for i, s := range systems {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			rate, cpu, err := o.runOne(ctx, conn, base, s)
			if err != nil {
				failed++
				results[i].Errors = append(results[i].Errors, fmt.Sprintf("round %d: %v", r+1, err))
				fmt.Fprintf(o.Progress, "compare: round %d/%d: %s failed: %v\n", r+1, o.Rounds, s.name, err)
				line = append(line, s.name+" failed")
				continue
			}
			results[i].Rounds[r] = rate
			if rate > results[i].Best {
				results[i].Best, results[i].CPU = rate, cpu
			}
			fmt.Fprintf(o.Progress, "compare: round %d/%d: %s %s tasks/s\n", r+1, o.Rounds, s.name, thousands(rate))
			line = append(line, s.name+" "+thousands(rate)+"/s")
		}
		fmt.Fprintf(o.Progress, "compare: round %d/%d done: %s\n", r+1, o.Rounds, strings.Join(line, ", "))
	}
	if !o.Keep {
		for _, s := range systems {
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{s.db}.Sanitize()+" WITH (FORCE)"); err != nil {
				fmt.Fprintf(o.Progress, "compare: dropping %s: %v\n", s.db, err)
			}
		}
	}
	if i := slices.IndexFunc(results, func(r Result) bool { return r.Name == Skiplock }); i >= 0 && results[i].Best > 0 {
		for j := range results {
			if results[j].Best > 0 {
				results[j].Ratio = results[i].Best / results[j].Best
			}
		}
	}
	rep.Systems = results
	if o.JSON {
		err = writeJSON(stdout, rep)
	} else {
		err = writeTable(stdout, rep)
	}
	if err != nil {
		return rep, err
	}
	if failed > 0 {
		return rep, fmt.Errorf("%d run(s) failed (see the table's errors)", failed)
	}
	return rep, nil
}

func names(ss []system) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.name
	}
	return out
}

// systems lays out the columns, setting up Graphile Worker's directory
// first when it is among them.
func (o Options) systems(c *Conditions) ([]system, error) {
	var out []system
	child := func(name string) []string {
		return append(slices.Clone(o.Self), ChildArg, name)
	}
	for _, name := range o.Systems {
		s := system{name: name, db: o.DBPrefix + name}
		switch name {
		case Skiplock:
			s.argv = child(Skiplock)
			how := "EnqueueMany"
			if o.Enqueue == EnqueueSingle {
				how = "16 producers calling Enqueue"
			}
			s.detail = "skiplock, this build: one worker process with default worker.Config; enqueued by " + how
		case River:
			s.argv = child(River)
			c.River = riverVersion()
			s.detail = fmt.Sprintf("River%s (riverpgxv5): MaxWorkers %s, FetchCooldown %s, FetchPollInterval %s; inserted by InsertManyFast (COPY)",
				strings.TrimRight(" "+c.River, " "), thousands(riverMaxWorkers), riverFetchCooldown, riverFetchPollInterval)
		case Graphile:
			dir, version, err := graphileSetup(o.GraphileDir, o.Progress)
			if err != nil {
				return nil, err
			}
			s.argv = []string{"node", filepath.Join(dir, "bench.mjs"), "--procs", strconv.Itoa(graphileProcs)}
			s.dir = dir
			c.Graphile = version
			s.detail = fmt.Sprintf("Graphile Worker %s (Node.js): %d processes, 24 concurrent jobs each, local queue 500, batched completions; added by addJobs",
				version, graphileProcs)
		case Cycle:
			s.argv = child(Cycle)
			s.detail = fmt.Sprintf("the bare SQL cycle, no framework: claim %s (SKIP LOCKED + advisory locks), complete, unlock, on 2 connections; inserted by INSERT ... SELECT",
				thousands(cycleBatch))
		}
		out = append(out, s)
	}
	for _, a := range o.Also {
		out = append(out, system{
			name:   a.Name,
			db:     o.DBPrefix + "also_" + strings.ToLower(strings.ReplaceAll(a.Name, "-", "_")),
			argv:   []string{"sh", "-c", a.Command},
			detail: a.Command,
		})
	}
	return out, nil
}

// runOne gives s a fresh database and runs it; it returns its rate, and
// its CPU per task if it reports it.
func (o Options) runOne(ctx context.Context, admin *pgx.Conn, base *url.URL, s system) (float64, *CPU, error) {
	db := pgx.Identifier{s.db}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
		return 0, nil, fmt.Errorf("dropping its database: %w", err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return 0, nil, fmt.Errorf("creating its database: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, s.argv[0], s.argv[1:]...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(),
		"PEER_N="+strconv.Itoa(o.N),
		"PEER_DSN="+withDatabase(base, s.db).String(),
		"PEER_ENQUEUE="+o.Enqueue)
	cmd.Env = append(cmd.Env, s.env...)
	ownProcessGroup(cmd)
	var out bytes.Buffer
	errs := &tail{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = &out, errs
	err := cmd.Run()
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("timed out after %s", o.Timeout)
		}
		return 0, nil, fmt.Errorf("%w; its last output:\n%s", err, indent(errs.String()))
	}
	rate, ok := ParseRate(out.String())
	if !ok || !(rate > 0) {
		return 0, nil, fmt.Errorf("no positive work_per_s in its output:\n%s", indent(out.String()))
	}
	return rate, ParseCPU(out.String()), nil
}

var rateRE = regexp.MustCompile(`"?work_per_s"?\s*[=:]\s*([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)`)

var cpuRE = regexp.MustCompile(`(machine|client|server)_cpu_us_per_task=([0-9]+(?:\.[0-9]+)?)`)

// ParseCPU reads the last machine_cpu_us_per_task=, client_cpu_us_per_task=
// and server_cpu_us_per_task= in out; nil without a machine figure.
func ParseCPU(out string) *CPU {
	var c CPU
	for _, m := range cpuRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "machine":
			c.Machine = v
		case "client":
			c.Client, c.Split = v, true
		case "server":
			c.Server, c.Split = v, true
		}
	}
	if c.Machine <= 0 {
		return nil
	}
	return &c
}

// ParseRate finds the last work_per_s=NUMBER or "work_per_s": NUMBER in
// out.
func ParseRate(out string) (float64, bool) {
	m := rateRE.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[len(m)-1][1], 64)
	return v, err == nil
}

// roundTrip is the median of 50 SELECT 1 on a connection to dsn.
func roundTrip(ctx context.Context, dsn string) (time.Duration, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil { // prepares it
		return 0, err
	}
	ds := make([]time.Duration, 50)
	for i := range ds {
		start := time.Now()
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			return 0, err
		}
		ds[i] = time.Since(start)
	}
	slices.Sort(ds)
	return (ds[24] + ds[25]) / 2, nil
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (nothing)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
