package bench

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/cpustat"
	"github.com/skiplock/skiplock/queue"
)

// benchPayload is every bench task's payload: small, as most are.
type benchPayload struct {
	N int `json:"n"`
}

// noopTasks makes the no-op tasks numbered from to to-1.
func noopTasks(from, to int) []queue.NewTask {
	tasks := make([]queue.NewTask, 0, to-from)
	for i := from; i < to; i++ {
		tasks = append(tasks, queue.NewTask{Name: noopTask, Payload: benchPayload{N: i}})
	}
	return tasks
}

// preload enqueues n no-op tasks with EnqueueMany (COPY); the time it takes
// is not measured.
func (b *bencher) preload(ctx context.Context, s *schema, n int, label string) error {
	const chunk = 50_000
	client := queue.New(s.pool)
	for done := 0; done < n; {
		tasks := noopTasks(done, min(n, done+chunk))
		if _, err := client.EnqueueMany(ctx, tasks); err != nil {
			return fmt.Errorf("preloading: %w", err)
		}
		done += len(tasks)
		b.prog.status("%s: preloading %s/%s tasks", label, formatNumber(float64(done)), formatNumber(float64(n)))
	}
	return nil
}

// benchWorkflow is workflow i of the workflow workload, size no-op tasks: a
// root, size-2 tasks that depend on it (fan-out) and a final task that
// depends on all of those (fan-in). Payloads number the tasks from i*size.
func benchWorkflow(i, size int) queue.Workflow {
	first := i * size
	steps := make([]queue.Step, 0, size)
	steps = append(steps, queue.Step{Name: "root", Task: noopTask, Payload: benchPayload{N: first}})
	fan := make([]string, 0, size-2)
	for j := 1; j < size-1; j++ {
		name := "fan-" + strconv.Itoa(j)
		fan = append(fan, name)
		steps = append(steps, queue.Step{Name: name, Task: noopTask, Payload: benchPayload{N: first + j}, DependsOn: []string{"root"}})
	}
	steps = append(steps, queue.Step{Name: "final", Task: noopTask, Payload: benchPayload{N: first + size - 1}, DependsOn: fan})
	return queue.Workflow{Name: "bench-" + strconv.Itoa(i), Steps: steps}
}

// workflowBatch is how many workflows preloadWorkflows enqueues in one
// transaction: one commit, and its WAL flush, per batch rather than per
// workflow.
const workflowBatch = 10

// preloadWorkflows enqueues n tasks as workflows of size tasks
// (benchWorkflow) with EnqueueWorkflowTx, workflowBatch workflows a
// transaction, one transaction at a time, and returns the rate in tasks per
// second; building the workflows is not timed.
func (b *bencher) preloadWorkflows(ctx context.Context, s *schema, n, size int, label string) (float64, error) {
	client := queue.New(s.pool)
	workflows := n / size
	var elapsed time.Duration
	for done := 0; done < workflows; {
		batch := make([]queue.Workflow, 0, workflowBatch)
		for i := done; i < min(done+workflowBatch, workflows); i++ {
			batch = append(batch, benchWorkflow(i, size))
		}
		start := time.Now()
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for _, wf := range batch {
				if _, err := client.EnqueueWorkflowTx(ctx, tx, wf); err != nil {
					return err
				}
			}
			return nil
		})
		elapsed += time.Since(start)
		if err != nil {
			return 0, fmt.Errorf("preloading workflows: %w", err)
		}
		done += len(batch)
		b.prog.status("%s: preloading %s/%s workflows, %s tasks/s", label, formatNumber(float64(done)), formatNumber(float64(workflows)),
			formatNumber(rate(int64(done*size), elapsed)))
	}
	return rate(int64(n), elapsed), nil
}

// workCase is one backlog worked by worker processes.
type workCase struct {
	tasks       int
	procs       int
	concurrency int // 0: the worker's default
	// limit, when positive, is the Max of a queue.Limit set on the bench's
	// queue before the workers start.
	limit int
	// workflowSize, when positive, makes the backlog workflows of this
	// many tasks (benchWorkflow) instead of independent tasks.
	workflowSize int
	// burst starts the workers on an empty queue, feeds them a trickle,
	// and only then enqueues the backlog (with COPY, while they work):
	// statements are prepared, and their plans cached, on a small table.
	burst bool
}

// burstWarmup is the trickle a burst case starts with: enough statements
// for PostgreSQL to switch prepared statements to generic plans (it tries
// after five executions).
const burstWarmup = 200

// workBacklog preloads a backlog into a fresh schema, starts the worker
// processes together and times them from the start signal until the
// database shows no task pending or running.
func (b *bencher) workBacklog(ctx context.Context, c workCase, label string) ([]measure, error) {
	s, err := b.env.newSchema(ctx, 0)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	var enqueueRate float64
	switch {
	case c.workflowSize > 0:
		if enqueueRate, err = b.preloadWorkflows(ctx, s, c.tasks, c.workflowSize, label); err != nil {
			return nil, err
		}
	case !c.burst:
		if err := b.preload(ctx, s, c.tasks, label); err != nil {
			return nil, err
		}
	}
	if b.opts.Vacuum && !c.burst {
		b.prog.status("%s: vacuum analyze", label)
		if err := s.vacuum(ctx); err != nil {
			return nil, fmt.Errorf("vacuum: %w", err)
		}
	}
	if c.limit > 0 {
		// Set before the workers start: their first claim sees it.
		if err := queue.New(s.pool).SetLimit(ctx, queue.Limit{Queue: queue.DefaultQueue, Max: c.limit}); err != nil {
			return nil, err
		}
	}

	spec := workerSpec{URL: b.env.url, Schema: s.name, Concurrency: c.concurrency, Mode: b.opts.Mode, Trace: b.opts.Trace,
		DeleteCompleted: b.opts.DeleteCompleted, Settings: b.opts.WorkerSettings, LockSettings: b.opts.LockSessionSettings}
	if b.opts.CPUProfile != "" && !b.profiled {
		spec.CPUProfile = b.opts.CPUProfile
		b.profiled = true
	}
	ps, err := startProcs(ctx, b.opts.Self, c.procs, spec, b.opts.Progress)
	if err != nil {
		return nil, err
	}
	defer ps.stop()

	var warm int64
	if c.burst {
		if err := ps.start(); err != nil {
			return nil, err
		}
		if err := b.trickle(ctx, s, ps, label); err != nil {
			return nil, err
		}
		warm = burstWarmup
	}
	want := warm + int64(c.tasks)

	srv0, srvErr := s.serverStats(ctx)
	locks := watchLocks(ctx, s)
	defer locks.stop()
	probe := startCPUProbe(ctx, s, ps)
	start := time.Now()
	if c.burst {
		// The workers start on the first 10,000 while the rest is copied
		// in. The copy ends before the schema is dropped.
		copyCtx, stopCopy := context.WithCancel(ctx)
		var copying sync.WaitGroup
		defer func() {
			stopCopy()
			copying.Wait()
		}()
		copying.Go(func() {
			client := queue.New(s.pool)
			for done := 0; done < c.tasks && copyCtx.Err() == nil; done += 10_000 {
				if _, err := client.EnqueueMany(copyCtx, noopTasks(done, min(done+10_000, c.tasks))); err != nil {
					if copyCtx.Err() == nil {
						b.prog.logf("%s: enqueueing the burst: %v", label, err)
					}
					return
				}
			}
		})
	} else if err := ps.start(); err != nil {
		return nil, err
	}
	stopProgress := b.prog.track(func() string {
		n := ps.done() - warm
		return fmt.Sprintf("%s: %s/%s tasks, %s/s", label, formatNumber(float64(n)), formatNumber(float64(c.tasks)),
			formatNumber(rate(n, time.Since(start))))
	})
	defer stopProgress()

	// Handlers first (cheap to watch), then the database: the run ends when
	// the last outcome is committed.
	var handlersDone time.Duration
	lastN, lastChange := int64(0), time.Now()
	for {
		if err := ps.failed(); err != nil {
			return nil, err
		}
		n := ps.done()
		if n >= want {
			if handlersDone == 0 {
				handlersDone = time.Since(start)
			}
			busy, err := s.busy(ctx)
			if err != nil {
				return nil, err
			}
			if !busy {
				break
			}
		}
		if n != lastN {
			lastN, lastChange = n, time.Now()
		} else if time.Since(lastChange) > time.Minute {
			return nil, fmt.Errorf("no progress for a minute at %d of %d tasks", n, c.tasks)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	workerCPU, serverCPU, restCPU := probe.end(ctx)
	switches := probe.switches(ctx)
	rss := ps.rss()
	maxLocks := locks.stop()
	stopProgress()
	if err := ps.stop(); err != nil {
		return nil, err
	}

	completed, err := countCompleted(ctx, s.pool, want, b.opts.DeleteCompleted && c.workflowSize == 0)
	if err != nil {
		return nil, err
	}
	if completed != want {
		return nil, fmt.Errorf("%d of %d tasks completed", completed, want)
	}
	perTask := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(c.tasks) }
	ms := []measure{{metric: "throughput", unit: "tasks/s", value: rate(int64(c.tasks), elapsed)}}
	if c.workflowSize > 0 {
		// Every task but the roots waited for its dependencies: the
		// completion of the last one released it.
		var released int
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE status = 'completed' AND depends_on IS NOT NULL").Scan(&released); err != nil {
			return nil, err
		}
		if want := c.tasks / c.workflowSize * (c.workflowSize - 1); released != want {
			return nil, fmt.Errorf("%d tasks released by dependencies, want %d", released, want)
		}
		ms = append(ms,
			measure{metric: "workflow enqueue", unit: "tasks/s", value: enqueueRate},
			measure{metric: "released by dependencies", unit: "tasks", value: float64(released)},
		)
	}
	ms = append(ms, []measure{
		{metric: "elapsed", unit: "s", value: elapsed.Seconds()},
		{metric: "handlers done at", unit: "s", value: handlersDone.Seconds()},
		{metric: "first task after Run", unit: "ms", value: float64(ps.first().Microseconds()) / 1000},
		{metric: "worker CPU", unit: "µs/task", value: perTask(workerCPU)},
		{metric: "server CPU (worker's backends)", unit: "µs/task", value: perTask(serverCPU)},
		{metric: "other CPU (rest of machine)", unit: "µs/task", value: perTask(restCPU)},
		{metric: "machine idle", unit: "%", value: 100 * max(1-(workerCPU+serverCPU+restCPU).Seconds()/(elapsed.Seconds()*float64(runtime.NumCPU())), 0)},
		{metric: "context switches: worker", unit: "per task", value: float64(switches.worker) / float64(c.tasks)},
		{metric: "context switches: backends", unit: "per task", value: float64(switches.backends) / float64(c.tasks)},
		{metric: "context switches: machine", unit: "per task", value: float64(switches.machine) / float64(c.tasks)},
		{metric: "worker RSS", unit: "MiB", value: mib(rss) / float64(c.procs)},
		{metric: "max task locks held", unit: "locks", value: float64(maxLocks)},
	}...)
	if srv1, err := s.serverStats(ctx); err == nil && srvErr == nil {
		per1k := func(d float64) float64 { return 1000 * d / float64(c.tasks) }
		ms = append(ms,
			measure{metric: "WAL", unit: "bytes/task", value: (srv1.walBytes - srv0.walBytes) / float64(c.tasks)},
			measure{metric: "WAL full-page images", unit: "per 1k tasks", value: per1k(srv1.walFPI - srv0.walFPI)},
			measure{metric: "checkpoints", unit: "count", value: srv1.checkpoints - srv0.checkpoints},
			measure{metric: "buffers written by backends", unit: "per 1k tasks", value: per1k(srv1.backendWrites - srv0.backendWrites)},
			measure{metric: "table size at end", unit: "MiB", value: mib(srv1.tableBytes)},
		)
	}
	if b.opts.Trace {
		ms = append(ms, traceMeasures(ps, c.tasks, elapsed)...)
	}
	return ms, nil
}

// traceMeasures summarizes the worker processes' statements: how many per
// task, how many rows each, how long each took as the worker saw it, and
// how busy the lock sessions were.
func traceMeasures(ps procs, tasks int, elapsed time.Duration) []measure {
	all := map[string]queryStat{}
	for _, p := range ps {
		for name, s := range p.stats {
			a := all[name]
			a.Calls += s.Calls
			a.Rows += s.Rows
			a.Total += s.Total
			a.Max = max(a.Max, s.Max)
			all[name] = a
		}
	}
	var out []measure
	var statements int64
	for _, s := range all {
		statements += s.Calls
	}
	out = append(out, measure{metric: "statements", unit: "per 1k tasks", value: 1000 * float64(statements) / float64(tasks)})
	// Every statement that runs at least once per 2,000 tasks, the most
	// time-consuming first; the rest is maintenance (rescuer, heartbeats).
	names := make([]string, 0, len(all))
	for name, st := range all {
		if 2000*st.Calls >= int64(tasks) {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(all[b].Total, all[a].Total) })
	for _, name := range names {
		s := all[name]
		out = append(out,
			measure{metric: name + " calls", unit: "per 1k tasks", value: 1000 * float64(s.Calls) / float64(tasks)},
			measure{metric: name + " mean", unit: "ms", value: ms(s.Total) / float64(s.Calls)},
			measure{metric: name + " max", unit: "ms", value: ms(s.Max)},
			measure{metric: name + " rows", unit: "per call", value: float64(s.Rows) / float64(s.Calls)},
		)
	}
	// In advisory mode the lock session runs every claim and unlock, one
	// at a time: its busy share is how close it is to being the limit.
	if lockSession := all["TaskClaim"].Total + all["TaskClaimPlain"].Total + all["TaskUnlockMany"].Total; all["TaskUnlockMany"].Calls > 0 {
		out = append(out, measure{metric: "lock session busy", unit: "%", value: 100 * lockSession.Seconds() / (elapsed.Seconds() * float64(len(ps)))})
	}
	return out
}

// lockWatch samples how many task advisory locks are held on the schema's
// table, every 20ms, and keeps the maximum: Concurrency is meant to bound
// it, and the server's lock table is finite and shared.
type lockWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	max    int64
}

func watchLocks(ctx context.Context, s *schema) *lockWatch {
	ctx, cancel := context.WithCancel(ctx)
	l := &lockWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		// Not faster: reading pg_locks takes every partition of the lock
		// table while it copies them (4,000 entries with 8 workers), and
		// every claim and unlock of every worker waits for that.
		every(ctx, time.Second, func() bool {
			var n int64
			err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
				WHERE locktype = 'advisory' AND objsubid = 2 AND classid = 'skiplock_tasks'::regclass::oid`).Scan(&n)
			if err == nil {
				l.max = max(l.max, n)
			}
			return true
		})
	}()
	return l
}

// stop ends the sampling and returns the maximum seen.
func (l *lockWatch) stop() int64 {
	l.cancel()
	<-l.done
	return l.max
}

// serverStats are server-wide counters (pg_stat_wal, pg_stat_bgwriter)
// and the table's size: what a run costs the server beyond CPU.
type serverStats struct {
	walBytes, walFPI, checkpoints, backendWrites float64
	tableBytes                                   int64
}

func (s *schema) serverStats(ctx context.Context) (serverStats, error) {
	var st serverStats
	err := s.pool.QueryRow(ctx, `SELECT w.wal_bytes::float8, w.wal_fpi::float8,
			(b.checkpoints_timed + b.checkpoints_req)::float8, b.buffers_backend::float8,
			pg_total_relation_size('skiplock_tasks')
		FROM pg_stat_wal AS w, pg_stat_bgwriter AS b`).
		Scan(&st.walBytes, &st.walFPI, &st.checkpoints, &st.backendWrites, &st.tableBytes)
	return st, err
}

// trickle feeds started workers burstWarmup tasks, ten at a time, and waits
// until they have run.
func (b *bencher) trickle(ctx context.Context, s *schema, ps procs, label string) error {
	client := queue.New(s.pool)
	for i := 0; i < burstWarmup; i += 10 {
		batch := make([]queue.NewTask, 10)
		for j := range batch {
			batch[j] = queue.NewTask{Name: noopTask, Payload: benchPayload{N: i + j}}
		}
		if _, err := client.EnqueueMany(ctx, batch); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	deadline := time.Now().Add(time.Minute)
	for ps.done() < burstWarmup {
		if err := ps.failed(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: the warm-up trickle did not run within a minute", label)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// busy reports whether any task is pending or running. Both states have a
// partial index, so this stays cheap on a table of completed rows.
func (s *schema) busy(ctx context.Context) (bool, error) {
	var busy bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM skiplock_tasks WHERE status = 'running')
		OR EXISTS (SELECT 1 FROM skiplock_tasks WHERE status = 'pending')`).Scan(&busy)
	if err == pgx.ErrNoRows {
		return false, nil
	}
	return busy, err
}

// backlogs runs the throughput workload (one worker process with default
// settings works a backlog, under each of Options.Limits) and the workflow
// workload (the backlog is workflows), whichever are selected, as one set of
// cases whose runs alternate: a side by side from the same run.
func (b *bencher) backlogs(ctx context.Context) error {
	var cases []benchCase
	if slices.Contains(b.opts.Workloads, WorkloadThroughput) && len(b.opts.Shards) > 0 {
		cases = b.shardCases()
	} else if slices.Contains(b.opts.Workloads, WorkloadThroughput) {
		cases = b.backlogCases(WorkloadThroughput, workCase{}, b.opts.Limits, func(c workCase, ms []measure) {
			// The targets are the claim's, with no limit set.
			if c.concurrency != 0 || c.limit != 0 {
				return
			}
			switch c.tasks {
			case 100_000:
				ms[0].target = &target{atLeast: true, v: 36_000}
			case 1_000_000:
				ms[0].target = &target{atLeast: true, v: 25_000}
			}
		})
	}
	if slices.Contains(b.opts.Workloads, WorkloadWorkflow) {
		cases = append(cases, b.backlogCases(WorkloadWorkflow, workCase{workflowSize: b.opts.WorkflowSize}, []int{0}, nil)...)
	}
	return b.alternate(ctx, cases)
}

// burst: the backlog arrives while the workers are already running, after
// a trickle of work on an empty table.
func (b *bencher) burst(ctx context.Context) error {
	return b.alternate(ctx, b.backlogCases(WorkloadBurst, workCase{burst: true}, []int{0}, nil))
}

// backlogCases are the cases of workload with one worker process: base
// with each task count and concurrency of the options and each of limits.
// targets, if set, sets the targets of a case's measures.
func (b *bencher) backlogCases(workload string, base workCase, limits []int, targets func(c workCase, ms []measure)) []benchCase {
	var cases []benchCase
	for _, n := range b.opts.Tasks {
		for _, conc := range b.opts.Concurrency {
			for _, limit := range limits {
				c := base
				c.tasks, c.procs, c.concurrency, c.limit = n, 1, conc, limit
				name := fmt.Sprintf("tasks=%d", n)
				params := map[string]float64{"tasks": float64(n), "procs": 1, "concurrency": float64(concurrencyOf(conc))}
				if c.workflowSize > 0 {
					name += fmt.Sprintf(" workflows=%dx%d", n/c.workflowSize, c.workflowSize)
					params["workflow_size"] = float64(c.workflowSize)
				}
				if conc != 0 {
					name += fmt.Sprintf(" concurrency=%d", conc)
				}
				if limit != 0 {
					name += fmt.Sprintf(" limit=%d", limit)
					params["limit"] = float64(limit)
				}
				if b.opts.Vacuum && !c.burst {
					name += " vacuumed"
				}
				cases = append(cases, benchCase{workload: workload, name: name, params: params,
					run: func(ctx context.Context, run int) ([]measure, error) {
						ms, err := b.workBacklog(ctx, c, workload+" "+name+runLabel(run, b.opts.Runs))
						if err == nil && targets != nil {
							targets(c, ms)
						}
						return ms, err
					}})
			}
		}
	}
	return cases
}

// scaling: the same backlog worked by more processes, and by workers of
// different concurrency.
func (b *bencher) scaling(ctx context.Context) error {
	n := b.opts.Tasks[0]
	for _, conc := range b.opts.Concurrency {
		for _, p := range b.opts.Procs {
			name := fmt.Sprintf("tasks=%d procs=%d concurrency=%d", n, p, concurrencyOf(conc))
			if b.opts.Vacuum {
				name += " vacuumed"
			}
			params := map[string]float64{"tasks": float64(n), "procs": float64(p), "concurrency": float64(concurrencyOf(conc))}
			err := b.repeat(ctx, WorkloadScaling, name, params, func(ctx context.Context, run int) ([]measure, error) {
				return b.workBacklog(ctx, workCase{tasks: n, procs: p, concurrency: conc}, WorkloadScaling+" "+name+runLabel(run, b.opts.Runs))
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// cpuProbe splits the CPU time of a run between the worker processes, the
// server backends serving them, and the rest of the machine (the bench
// itself, the server's WAL writer and checkpointer, and anything else
// running: a busy machine shows up here).
//
// It counts context switches the same way: each is a thread that went off
// its CPU (to wait for a socket, a lock or a timer, or preempted), and on
// a virtual machine each sleep and wake-up may cost a trip through the
// hypervisor, so a run whose switches per task grow spends more CPU per
// task for the same statements.
type cpuProbe struct {
	s        *schema
	ps       procs
	worker   time.Duration
	backends map[int]time.Duration
	machine  time.Duration
	// Context switches at the start: the worker processes', each backend's
	// and the machine's.
	workerSwitches  int64
	backendSwitches map[int]int64
	machineSwitches int64
}

// switchCounts are the context switches made during a run: the worker
// processes' threads, their backends, the whole machine.
type switchCounts struct {
	worker, backends, machine int64
}

func startCPUProbe(ctx context.Context, s *schema, ps procs) *cpuProbe {
	p := &cpuProbe{s: s, ps: ps, worker: ps.cpu(), machine: cpustat.MachineBusy(), backends: map[int]time.Duration{},
		workerSwitches: ps.switches(), backendSwitches: map[int]int64{}, machineSwitches: cpustat.MachineSwitches()}
	for _, pid := range p.backendPIDs(ctx) {
		p.backends[pid] = cpustat.Process(pid)
		p.backendSwitches[pid] = cpustat.Switches(pid)
	}
	return p
}

// switches returns the context switches made since the start by each
// part; backends that were not there at the start count from zero.
func (p *cpuProbe) switches(ctx context.Context) switchCounts {
	var backends int64
	for _, pid := range p.backendPIDs(ctx) {
		backends += cpustat.Switches(pid) - p.backendSwitches[pid]
	}
	return switchCounts{
		worker:   p.ps.switches() - p.workerSwitches,
		backends: backends,
		machine:  cpustat.MachineSwitches() - p.machineSwitches,
	}
}

// backendPIDs finds the server processes of the worker processes'
// connections by their client ports; none over Unix sockets.
func (p *cpuProbe) backendPIDs(ctx context.Context) []int {
	var ports []int
	for _, w := range p.ps {
		ports = append(ports, tcpPorts(w.pid())...)
	}
	if len(ports) == 0 {
		return nil
	}
	rows, err := p.s.pool.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1)", ports)
	if err != nil {
		return nil
	}
	pids, _ := pgx.CollectRows(rows, pgx.RowTo[int])
	return pids
}

// end returns the CPU time used since the start by each part.
func (p *cpuProbe) end(ctx context.Context) (worker, backends, rest time.Duration) {
	worker = p.ps.cpu() - p.worker
	for _, pid := range p.backendPIDs(ctx) {
		backends += cpustat.Process(pid) - p.backends[pid]
	}
	rest = cpustat.MachineBusy() - p.machine - worker - backends
	return worker, backends, rest
}
