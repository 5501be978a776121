package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/cpustat"
	"github.com/skiplock/skiplock/worker"
)

// Worker processes are the bench binary itself, started again with
// WorkerProcessFlag and a workerSpec in the environment, so that scaling and
// memory are measured on real processes. The protocol on their stdin and
// stdout is line based:
//
//	child:  ready               pool connected; waiting for go
//	parent: go                  start the worker (the parent's clock starts)
//	child:  done <n> <heap>     every 50ms: handlers run, live heap bytes
//	parent: (closes stdin)      shut down gracefully
//	child:  stat <query> <calls> <rows> <total ns> <max ns>
//	                            with tracing on, after worker.Run returned
//	child:  exit <n>            after worker.Run returned

// WorkerProcessFlag, as the first argument after Options.Self, runs the
// hidden worker mode instead of the bench.
const WorkerProcessFlag = "--worker-process"

// workerEnv carries the workerSpec as JSON, keeping the database URL (and
// any password in it) off the command line.
const workerEnv = "SKIPLOCK_BENCH_WORKER"

// noopTask is the name of the bench's tasks; its handler does nothing.
const noopTask = "noop"

type workerSpec struct {
	URL         string `json:"url"`
	Schema      string `json:"schema"`
	Concurrency int    `json:"concurrency,omitempty"`
	Mode        string `json:"mode,omitempty"`
	CPUProfile  string `json:"cpu_profile,omitempty"`
	Trace       bool   `json:"trace,omitempty"`
	// DeleteCompleted is the worker's Config.DeleteCompleted.
	DeleteCompleted bool `json:"delete_completed,omitempty"`
	// Settings are SET on every connection of the worker, LockSettings on
	// its lock session only: experiments such as synchronous_commit=off.
	Settings     []string `json:"settings,omitempty"`
	LockSettings []string `json:"lock_settings,omitempty"`
	// RateLimits are the worker's Config.RateLimits (the rate-key
	// workload's).
	RateLimits []worker.RateLimit `json:"rate_limits,omitempty"`
	// Databases, when set, replace URL and Schema: the databases to work,
	// by shard number. Shard 0 alone is one database worked by
	// worker.New; shards 1 and up are worked by one worker.NewSharded.
	Databases map[int]shardDB `json:"databases,omitempty"`
}

// shardDB is a database on a server: the server's URL and the database
// name that replaces the URL's.
type shardDB struct {
	URL      string `json:"url"`
	Database string `json:"database"`
}

// runner is a worker.Worker or a worker.ShardedWorker.
type runner interface {
	Run(ctx context.Context, handlers worker.Handlers) error
}

// workerProcess is the child's side: a worker with default settings (but
// for Concurrency when the parent sets it) and a no-op handler.
func workerProcess(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) error {
	var spec workerSpec
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &spec); err != nil {
		return fmt.Errorf("worker process: %s: %w", workerEnv, err)
	}
	var stats *queryStats
	if spec.Trace {
		stats = newQueryStats()
	}
	openPool := func(url, database, schema string) (*pgxpool.Pool, error) {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return nil, err
		}
		if database != "" {
			cfg.ConnConfig.Database = database
		}
		if schema != "" {
			cfg.ConnConfig.RuntimeParams["search_path"] = schema
		}
		if len(spec.Settings)+len(spec.LockSettings) > 0 {
			cfg.ConnConfig.AfterConnect = applySettings(spec.Settings, spec.LockSettings)
		}
		if stats != nil {
			cfg.ConnConfig.Tracer = stats
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, err
		}
		return pool, nil
	}
	pools := map[int]*pgxpool.Pool{}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	if len(spec.Databases) == 0 {
		pool, err := openPool(spec.URL, "", spec.Schema)
		if err != nil {
			return err
		}
		pools[0] = pool
	}
	for n, db := range spec.Databases {
		pool, err := openPool(db.URL, db.Database, "")
		if err != nil {
			return fmt.Errorf("shard %d: %w", n, err)
		}
		pools[n] = pool
	}

	var done, first atomic.Int64 // first: nanoseconds from Run's call to the first handler
	var runAt time.Time          // set before Run, read by handlers
	handlers := worker.Handlers{noopTask: func(context.Context, *worker.Task) error {
		if done.Add(1) == 1 {
			first.Store(int64(time.Since(runAt)))
		}
		return nil
	}}
	wcfg := worker.Config{
		Mode:            workerMode(spec.Mode),
		Concurrency:     spec.Concurrency,
		RateLimits:      spec.RateLimits,
		DeleteCompleted: spec.DeleteCompleted,
		Logger:          slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	var w runner
	if pool, ok := pools[0]; ok && len(pools) == 1 {
		w = worker.New(pool, wcfg)
	} else {
		sw, err := worker.NewSharded(pools, wcfg)
		if err != nil {
			return err
		}
		w = sw
	}

	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(stdout, format+"\n", args...)
	}
	say("ready")
	in := bufio.NewScanner(stdin)
	if !in.Scan() || in.Text() != "go" {
		return nil // the parent gave up before starting
	}
	if spec.CPUProfile != "" {
		f, err := os.Create(spec.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for in.Scan() {
		}
		stop() // stdin closed: shut down
	}()
	reportCtx, stopReport := context.WithCancel(context.Background())
	go func() {
		heap := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		every(reportCtx, 50*time.Millisecond, func() bool {
			metrics.Read(heap)
			say("done %d %d %d", done.Load(), heap[0].Value.Uint64(), first.Load())
			return true
		})
	}()
	runAt = time.Now()
	err := w.Run(runCtx, handlers)
	stopReport()
	if stats != nil {
		outMu.Lock()
		stats.write(stdout)
		outMu.Unlock()
	}
	say("exit %d %d", done.Load(), first.Load())
	return err
}

// workerMode maps Options.Mode to the worker's.
func workerMode(m string) worker.Mode {
	if m == "lease" {
		return worker.ModeLease
	}
	return worker.ModeAdvisory
}

// applySettings returns a pgconn AfterConnect hook that SETs settings on
// every connection, and lockSettings too on the lock session, which the
// worker names in application_name. The lock session copies the pool's
// connection config, hook included.
func applySettings(settings, lockSettings []string) func(context.Context, *pgconn.PgConn) error {
	return func(ctx context.Context, c *pgconn.PgConn) error {
		all := settings
		if c.ParameterStatus("application_name") == "skiplock lock session" {
			all = append(slices.Clone(settings), lockSettings...)
		}
		for _, s := range all {
			name, value, _ := strings.Cut(s, "=")
			sql := "SELECT set_config('" + strings.ReplaceAll(name, "'", "''") + "', '" + strings.ReplaceAll(value, "'", "''") + "', false)"
			if err := c.Exec(ctx, sql).Close(); err != nil {
				return fmt.Errorf("setting %s: %w", s, err)
			}
		}
		return nil
	}
}

// workerProc is the parent's handle on a worker process.
type workerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   atomic.Int64
	heap   atomic.Int64
	first  atomic.Int64         // nanoseconds from Run's call to its first handler; 0: none yet
	stats  map[string]queryStat // from stat lines; read after exited
	ready  chan struct{}
	exited chan struct{}
	err    error // set before exited is closed
}

func startWorkerProc(self []string, spec workerSpec, stderr io.Writer) (*workerProc, error) {
	env, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self[0], append(append([]string{}, self[1:]...), WorkerProcessFlag)...)
	cmd.Env = append(os.Environ(), workerEnv+"="+string(env))
	// Several processes copy their stderr into one writer, each from a
	// goroutine of its own.
	cmd.Stderr = lockedWriter{w: stderr}
	p := &workerProc{cmd: cmd, stats: map[string]queryStat{}, ready: make(chan struct{}), exited: make(chan struct{})}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting worker process %s: %w", self[0], err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		readyOnce := sync.OnceFunc(func() { close(p.ready) })
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "ready":
				readyOnce()
			case len(f) == 4 && f[0] == "done":
				n, _ := strconv.ParseInt(f[1], 10, 64)
				h, _ := strconv.ParseInt(f[2], 10, 64)
				first, _ := strconv.ParseInt(f[3], 10, 64)
				p.done.Store(n)
				p.heap.Store(h)
				p.first.Store(first)
			case len(f) == 6 && f[0] == "stat":
				var n [4]int64
				for i := range n {
					n[i], _ = strconv.ParseInt(f[i+2], 10, 64)
				}
				p.stats[f[1]] = queryStat{Calls: n[0], Rows: n[1], Total: time.Duration(n[2]), Max: time.Duration(n[3])}
			case len(f) == 3 && f[0] == "exit":
				n, _ := strconv.ParseInt(f[1], 10, 64)
				first, _ := strconv.ParseInt(f[2], 10, 64)
				p.done.Store(n)
				p.first.Store(first)
			}
		}
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("worker process %d: %w", cmd.Process.Pid, err)
		}
		p.err = err
		close(p.exited)
	}()
	return p, nil
}

func (p *workerProc) pid() int { return p.cmd.Process.Pid }

// waitReady waits until the process has connected.
func (p *workerProc) waitReady(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-p.exited:
		if p.err == nil {
			return errors.New("worker process exited before it was ready")
		}
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *workerProc) start() error {
	_, err := io.WriteString(p.stdin, "go\n")
	return err
}

// failed returns the process's error if it has exited.
func (p *workerProc) failed() error {
	select {
	case <-p.exited:
		if p.err == nil {
			return errors.New("worker process exited early")
		}
		return p.err
	default:
		return nil
	}
}

// stop shuts the process down gracefully, and kills it after timeout.
func (p *workerProc) stop(timeout time.Duration) error {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("worker process %d did not stop within %s; killed", p.pid(), timeout)
	}
}

// procs is a set of worker processes working one schema.
type procs []*workerProc

func startProcs(ctx context.Context, self []string, n int, spec workerSpec, stderr io.Writer) (procs, error) {
	var ps procs
	for i := range n {
		s := spec
		if s.CPUProfile != "" && n > 1 {
			s.CPUProfile = fmt.Sprintf("%s.%d", s.CPUProfile, i)
		}
		p, err := startWorkerProc(self, s, stderr)
		if err != nil {
			ps.stop()
			return nil, err
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		if err := p.waitReady(ctx); err != nil {
			ps.stop()
			return nil, err
		}
	}
	return ps, nil
}

func (ps procs) start() error {
	for _, p := range ps {
		if err := p.start(); err != nil {
			return err
		}
	}
	return nil
}

func (ps procs) failed() error {
	for _, p := range ps {
		if err := p.failed(); err != nil {
			return err
		}
	}
	return nil
}

// sum adds f up over the worker processes.
func sum[T int64 | time.Duration](ps procs, f func(*workerProc) T) (n T) {
	for _, p := range ps {
		n += f(p)
	}
	return n
}

func (ps procs) done() int64 {
	return sum(ps, func(p *workerProc) int64 { return p.done.Load() })
}

// first is how long after Run's call the first handler of any process ran
// (0 if none has).
func (ps procs) first() time.Duration {
	var least int64
	for _, p := range ps {
		if f := p.first.Load(); f > 0 && (least == 0 || f < least) {
			least = f
		}
	}
	return time.Duration(least)
}

func (ps procs) cpu() time.Duration {
	return sum(ps, func(p *workerProc) time.Duration { return cpustat.Process(p.pid()) })
}

// switches is how many context switches the worker processes' threads
// have made.
func (ps procs) switches() int64 {
	return sum(ps, func(p *workerProc) int64 { return cpustat.Switches(p.pid()) })
}

func (ps procs) rss() int64 {
	return sum(ps, func(p *workerProc) int64 { return rssBytes(p.pid()) })
}

func (ps procs) heap() int64 {
	return sum(ps, func(p *workerProc) int64 { return p.heap.Load() })
}

func (ps procs) stop() error {
	var errs []error
	for _, p := range ps {
		_ = p.stdin.Close()
	}
	for _, p := range ps {
		errs = append(errs, p.stop(90*time.Second))
	}
	return errors.Join(errs...)
}

// childStderr serializes the worker processes' writes to a shared stderr.
var childStderr sync.Mutex

type lockedWriter struct{ w io.Writer }

func (l lockedWriter) Write(b []byte) (int, error) {
	childStderr.Lock()
	defer childStderr.Unlock()
	return l.w.Write(b)
}
