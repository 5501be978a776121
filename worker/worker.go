package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/connstr"
	"github.com/skiplock/skiplock/queue"
)

// Errors of Run.
var (
	// ErrNoHandlers is returned by Run when given no handlers.
	ErrNoHandlers = errors.New("skiplock: worker needs at least one handler")
	// ErrAlreadyRunning is returned by a second call to Run on one Worker.
	ErrAlreadyRunning = errors.New("skiplock: worker is already running")
)

// Worker claims and runs tasks. Create it with New and start it with Run.
type Worker struct {
	pool    *pgxpool.Pool
	cfg     Config
	cfgErr  error
	queries *db.Queries
	log     *slog.Logger
	host    string
	pid     int

	mu       sync.Mutex
	started  bool
	inflight map[*execution]struct{}
	queues   *queueSet      // the queues claimed from, and their claim loops (queues.go)
	freed    freedAnnouncer // tells other workers that a place is free (freed.go)
	ownFreed ownFreed       // its announcements, which its listener passes over

	stops stopRequests // Stop and StopAndCancel (shutdown.go)

	schedules []schedule
	declared  leadership // the election of schedules' scheduler (declaredJob), if any
	producer  *queue.Client
	// schedulesChanged: the stored schedules changed (control.Schedules).
	schedulesChanged chan struct{}

	guard guard     // advisory locks or leases, as Config.Mode says
	iso   *isolator // runs suspect tasks alone (isolate.go)

	// Set by Run.
	handlers Handlers
	// handled are the names of handlers, sorted: the only names the
	// worker claims, and what it records in skiplock_workers.names.
	handled   []string
	unhandled unhandledWatch // pending names of its queues it has no handler for (unhandled.go)
	slots     *slots
	limits    claimLimits // per-queue slots and rate limits (claimlimits.go)
	// limitsSeen: whether any concurrency limit exists (clusterlimits.go).
	limitsSeen limitsProbe
	heldClaims heldClaims   // which statement a limited claim runs (clusterlimits.go)
	cursors    claimCursors // where each claim loop's claims start (cursor.go)
	settled    sync.WaitGroup
	execs      *executors // goroutines that run handlers (executors.go)
	// runExecution is executeHandlers, as a func value made once: a
	// method value made per task was an allocation per task.
	runExecution func(*execution)
	deadlines    deadlines // expires handlers' contexts at TaskTimeout (deadlines.go)
	gatherers    sync.Map  // *bulkSpec -> *gatherer: bulk handlers' groups (bulk.go)
	comp         *completer
	handoffs     *handoffs    // outcomes for the next claim to carry (handoff.go); nil in lease mode
	window       *windowSizer // sizes Concurrency by the round trip when it was left at zero
	classOID     int64        // skiplock_tasks' OID: the advisory lock class
	// limitClass is skiplock_limits' OID: the first key of limit slot
	// locks (clusterlimits.go).
	limitClass int32
	channel    string // work notifications: queue names
	control    string // commands to workers (internal/control)
}

// New returns a Worker that runs on pool. The pool's search_path must reach
// the schema skiplock was migrated into. An invalid cfg is reported by Run.
func New(pool *pgxpool.Pool, cfg Config) *Worker {
	cfg, err := cfg.withDefaults()
	// No log line names a password: pgx leaves them out of its errors,
	// and this catches what it cannot.
	secrets := connstr.Passwords(cfg.ListenURL)
	if pool != nil {
		secrets = append(secrets, pool.Config().ConnConfig.Password)
	}
	cfg.Logger = connstr.Logger(cfg.Logger, secrets...)
	schedules, serr := parseSchedules(cfg.Periodic)
	host, _ := os.Hostname()
	w := &Worker{
		schedules: schedules,
		declared:  declaredJob(schedules),
		producer:  queue.New(pool, queue.WithEncryption(cfg.Keyring)),
		pool:      pool,
		cfg:       cfg,
		cfgErr:    errors.Join(err, serr),
		queries:   db.New(),
		log:       cfg.Logger,
		host:      host,
		pid:       os.Getpid(),
		inflight:  map[*execution]struct{}{},
		execs:     newExecutors(),
		queues:    newQueueSet(cfg),
		stops:     newStopRequests(),

		schedulesChanged: make(chan struct{}, 1),
	}
	w.freed.send = w.sendFreed
	w.runExecution = w.executeHandlers
	w.iso = newIsolator(w)
	w.guard = newGuard(guardDeps{
		pool: pool, queries: w.queries, cfg: cfg, log: w.log,
		row:     workerRow{queries: w.queries, id: cfg.WorkerID, host: host, pid: int32(w.pid), queues: cfg.Queues, names: &w.handled, registered: new(atomic.Bool)},
		running: w.inflightSnapshot, cancel: w.cancelExecution, wakeAll: w.wakeAll,
		announce: w.freed.announce,
	})
	return w
}

func (w *Worker) now() time.Time { return w.cfg.now() }

// ID returns the worker's ID, as recorded in the tasks it runs.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Run claims and runs tasks with handlers until ctx ends, then shuts down
// gracefully: it stops claiming, lets running handlers finish for up to
// Config.ShutdownGrace, cancels the rest and returns their tasks to pending
// without spending an attempt, records every outcome, releases every lock
// and returns nil. It returns only then, or at once on a configuration
// error: invalid cfg or handlers (ErrNoHandlers), a schema not migrated
// (migrations.ErrNotMigrated), a transaction pooler in advisory mode
// (ErrTransactionPooling) or a statement cache behind one
// (ErrStatementCache), a login the server refuses, a database that does
// not exist, or a role that lacks a privilege workers need (an error
// wrapping queue.ErrPermissionDenied; migrations.Grants with
// migrations.Worker, or `skiplock migrate grants --kind worker`, gives
// them). A database that cannot be reached at start (or that is
// read-only: a standby, or a primary during a failover) is waited for,
// with backoff and one log line per change of state; so is one that goes
// away while the worker runs.
func (w *Worker) Run(ctx context.Context, handlers Handlers) error {
	if w.cfgErr != nil {
		return w.cfgErr
	}
	if len(handlers) == 0 {
		return ErrNoHandlers
	}
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return ErrAlreadyRunning
	}
	w.started = true
	w.mu.Unlock()
	defer close(w.stops.ran)
	w.handlers = wrap(handlers, w.cfg.Middleware)
	w.handled = handlerNames(handlers)
	// Stop and StopAndCancel end Run as the end of ctx does.
	ctx, endRun := context.WithCancel(ctx)
	defer endRun()
	go func() {
		select {
		case <-w.stops.graceful:
			endRun()
		case <-ctx.Done():
		}
	}()

	openGuard, err := w.start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while waiting for the database: nothing ran, nothing
			// to shut down.
			return nil
		}
		return err
	}

	// Background jobs live until shutdown is complete, not until ctx ends:
	// the completer must still write outcomes after ctx is done. The
	// periodic scheduler stops with ctx: nothing new is enqueued once
	// shutdown starts.
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	background, bgCtx := errgroup.WithContext(bgCtx)
	// The listener connects while the guard opens (each takes a few round
	// trips, and claims wait for both).
	listening := make(chan struct{})
	listen := w.newListener(listening)
	background.Go(func() error { listen.run(bgCtx); return nil })
	// So does the first look for concurrency limits, which the first claim
	// would otherwise wait for (the claim then reads it as seen).
	background.Go(func() error { w.limitsSeen.look(w.queries, w.pool, true); return nil })
	if err := openGuard(); err != nil {
		stopBackground()
		_ = background.Wait()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer w.guard.close()
	background.Go(func() error { w.comp.run(); return nil })
	for _, job := range w.backgroundJobs() {
		background.Go(func() error { job(bgCtx); return nil })
	}
	background.Go(func() error { w.scheduler().run(ctx); return nil })

	// Claim only once notifications can arrive, so that none sent after Run
	// starts is missed; if LISTEN cannot be had, polling still works.
	select {
	case <-listening:
	case <-time.After(5 * time.Second):
		w.log.Warn("skiplock: LISTEN not established after 5s; relying on polling until it is")
	}

	w.startClaiming(ctx)
	w.log.Info("skiplock: worker started", "worker_id", w.cfg.WorkerID, "mode", w.cfg.Mode, "queues", w.Queues(), "concurrency", w.cfg.Concurrency)

	<-ctx.Done()
	w.stopClaiming()
	if w.handoffs != nil {
		w.handoffs.close()
	}
	w.flushBulk()
	w.shutdown()
	w.comp.close()
	w.execs.stop()
	stopBackground()
	_ = background.Wait()
	w.guard.resign(w.electedJobs())
	w.log.Info("skiplock: worker stopped", "worker_id", w.cfg.WorkerID)
	return nil
}

// newListener is the worker's listener; listening is closed once its
// first LISTEN holds.
func (w *Worker) newListener(listening chan struct{}) *listener {
	return &listener{
		config: w.guard.listenConfig(), work: w.channel, control: w.control,
		onWork: w.heard, onControl: w.handleControl, onListen: func() { w.wakeAll(); w.iso.tell() },
		log: w.log, listening: listening,
	}
}

// backgroundJobs are the loops, other than the listener, that run beside
// the claim loops, each in a goroutine of its own, until shutdown is
// complete.
func (w *Worker) backgroundJobs() []func(context.Context) {
	rescuerElection := newElector(rescuerJob, w.guard, w.log, w.cfg.WorkerID)
	r := &rescuer{
		elector: rescuerElection, queries: w.queries, pool: w.pool, classOID: w.classOID, channel: w.channel,
		interval: w.cfg.RescueInterval, beforeRescue: w.guard.beforeRescue, observer: w.cfg.Observer, log: w.log,
		passed: w.cfg.rescuePassed, self: w.cfg.WorkerID, mode: w.cfg.Mode,
		maxCrashes: w.cfg.MaxCrashes, settle: crashSettle(w.cfg), suspects: w.notifySuspects,
	}
	ret := newRetirer(w.cfg, rescuerElection.isLeader, w.queries, w.pool, w.log)
	cp := &cancelPoller{
		queries: w.queries, pool: w.pool, interval: w.cfg.HealthInterval,
		running: w.inflightSnapshot, cancel: w.cancelTasks,
	}
	jobs := []func(context.Context){r.run, ret.run, cp.run, w.abandonOverdue, w.watchUnhandled}
	jobs = append(jobs, w.window.run)
	return append(jobs, w.guard.jobs()...)
}

func (w *Worker) inflightSnapshot() []*execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*execution, 0, len(w.inflight))
	for e := range w.inflight {
		out = append(out, e)
	}
	return out
}

// wake wakes the claim loop of a queue; "" wakes every claim loop (a
// notification of the work channel with an empty payload says a place of
// a concurrency limit or an exclusive key is free).
func (w *Worker) wake(queueName string) {
	if queueName == "" {
		w.wakeAll()
		return
	}
	if ch := w.queues.wakeChan(queueName); ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// heard wakes the claim loops a notification of the work channel from
// backend pid names, unless it is the worker's own announcement that a
// place is free: its loops were woken when it freed the place.
func (w *Worker) heard(queueName string, pid uint32) {
	if queueName == "" && w.ownFreed.own(pid) {
		return
	}
	w.wake(queueName)
}

func (w *Worker) wakeAll() {
	for _, q := range w.queues.wakeNames() {
		w.wake(q)
	}
}

// Run runs handlers on the database in DATABASE_URL with the default Config
// until SIGINT or SIGTERM, then shuts down gracefully (Worker.Stop); a
// second signal cancels the handlers still running (Worker.StopAndCancel).
// It is the whole main of a consumer binary:
//
//	func main() {
//		if err := worker.Run(handlers); err != nil {
//			log.Fatal(err)
//		}
//	}
func Run(handlers Handlers) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("skiplock: DATABASE_URL is not set (export DATABASE_URL=postgres://user@host:5432/dbname)")
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		return connstr.Error(fmt.Errorf("skiplock: DATABASE_URL: %w", err), connstr.Passwords(url)...)
	}
	defer pool.Close()
	w := New(pool, Config{})
	defer stopOnSignals(signals, w.Stop, w.StopAndCancel)()
	return w.Run(context.Background(), handlers)
}

// stopOnSignals calls stop at the first of signals and stopAndCancel at
// the second, until the function it returns is called.
func stopOnSignals(signals <-chan os.Signal, stop, stopAndCancel func(context.Context) error) (done func()) {
	quit := make(chan struct{})
	go func() {
		for _, f := range []func(context.Context) error{stop, stopAndCancel} {
			select {
			case <-signals:
				go f(context.Background()) //nolint:errcheck // Run's return reports the end
			case <-quit:
				return
			}
		}
	}()
	return func() { close(quit) }
}

func handlerNames(h Handlers) []string {
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
