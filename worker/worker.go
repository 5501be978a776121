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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// Errors of Run.
var (
	// ErrNoHandlers is returned by Run when given no handlers.
	ErrNoHandlers = errors.New("skiplock: worker needs at least one handler")
	// ErrAlreadyRunning is returned by a second call to Run on one Worker.
	ErrAlreadyRunning = errors.New("skiplock: worker is already running")
	// ErrNotMigrated is returned when the schema is missing or older than
	// this build of skiplock: run `skiplock migrate up`.
	ErrNotMigrated = pgerr.ErrNotMigrated
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
	wakes    map[string]chan struct{}

	schedules    []schedule
	producer     *queue.Client
	queueSlots   map[string]*semaphore.Weighted // queues with their own cap
	queueLimits  map[string]RateLimit           // rate limits by queue
	nameLimits   []RateLimit                    // rate limits by task name
	limitedNames []string

	// Set by Run.
	handlers  Handlers
	ls        *lockSession
	slots     *semaphore.Weighted
	slotFreed chan struct{} // a slot was released; for coalescing claims
	settled   sync.WaitGroup
	comp      *completer
	lease     bool  // Mode == ModeLease: no lock session
	classOID  int64 // skiplock_tasks' OID: the advisory lock class
	schema    string
	channel   string // work notifications: queue names
	control   string // commands to workers: "cancel:<id>"
}

// New returns a Worker that runs on pool. The pool's search_path must reach
// the schema skiplock was migrated into. An invalid cfg is reported by Run.
func New(pool *pgxpool.Pool, cfg Config) *Worker {
	cfg, err := cfg.withDefaults()
	schedules, serr := parseSchedules(cfg.Periodic)
	host, _ := os.Hostname()
	return &Worker{
		schedules: schedules,
		producer:  queue.New(pool),
		pool:      pool,
		cfg:       cfg,
		cfgErr:    errors.Join(err, serr),
		queries:   db.New(),
		log:       cfg.Logger,
		host:      host,
		pid:       os.Getpid(),
		inflight:  map[*execution]struct{}{},
		wakes:     map[string]chan struct{}{},
		lease:     cfg.Mode == ModeLease,
	}
}

func (w *Worker) now() time.Time { return w.cfg.now() }

// ID returns the worker's ID, as recorded in the tasks it runs.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Run claims and runs tasks with handlers until ctx ends, then shuts down
// gracefully: it stops claiming, lets running handlers finish for up to
// Config.ShutdownGrace, cancels the rest and returns their tasks to pending
// without spending an attempt, records every outcome, releases every lock
// and returns nil. It returns an error at once when the database cannot be
// reached, the schema is not migrated, or cfg or handlers are invalid.
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
	w.handlers = wrap(handlers, w.cfg.Middleware)

	if err := w.start(ctx); err != nil {
		return err
	}
	if w.ls != nil {
		defer w.ls.close()
	}

	// Background loops live until shutdown is complete, not until ctx ends:
	// the completer must still write outcomes after ctx is done.
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	background, bgCtx := errgroup.WithContext(bgCtx)
	background.Go(func() error { w.comp.run(); return nil })
	listening := make(chan struct{})
	background.Go(func() error { w.listen(bgCtx, listening); return nil })
	background.Go(func() error { w.maintain(bgCtx); return nil })
	background.Go(func() error { w.health(bgCtx); return nil })
	if w.lease {
		background.Go(func() error { w.heartbeat(bgCtx); return nil })
	}
	background.Go(func() error { w.schedulePeriodic(ctx); return nil })

	// Claim only once notifications can arrive, so that none sent after Run
	// starts is missed; if LISTEN cannot be had, polling still works.
	select {
	case <-listening:
	case <-time.After(5 * time.Second):
		w.log.Warn("skiplock: LISTEN not established after 5s; relying on polling until it is")
	}

	var claimers sync.WaitGroup
	for _, q := range w.cfg.Queues {
		claimers.Add(1)
		go func() {
			defer claimers.Done()
			w.claimLoop(ctx, q)
		}()
	}
	w.log.Info("skiplock: worker started", "worker_id", w.cfg.WorkerID, "mode", w.cfg.Mode, "queues", w.cfg.Queues, "concurrency", w.cfg.Concurrency)

	<-ctx.Done()
	claimers.Wait()
	w.shutdown()
	w.comp.close()
	stopBackground()
	_ = background.Wait()
	w.resign()
	w.log.Info("skiplock: worker stopped", "worker_id", w.cfg.WorkerID)
	return nil
}

// start checks the schema, opens the lock session and registers the worker.
func (w *Worker) start(ctx context.Context) error {
	// First, before any statement that a pooler could break: are sessions
	// real?
	pooled, err := transactionPooled(ctx, w.pool)
	if err != nil {
		return fmt.Errorf("skiplock: connecting to the database: %w", pgerr.Wrap(err))
	}
	switch {
	case pooled && !w.lease:
		return ErrTransactionPooling
	case pooled && cachesStatements(w.pool):
		return ErrStatementCache
	}
	table, err := w.queries.SchemaTaskTable(ctx, w.pool)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w (table skiplock_tasks not found in search_path)", ErrNotMigrated)
	}
	if err != nil {
		return fmt.Errorf("skiplock: connecting to the database: %w", pgerr.Wrap(err))
	}
	version, err := w.queries.SchemaVersion(ctx, w.pool)
	if err != nil {
		return fmt.Errorf("skiplock: reading schema version: %w", pgerr.Wrap(err))
	}
	if version.Dirty || uint(version.Version) < migrations.Latest {
		return fmt.Errorf("%w (schema at version %d%s, this build needs %d)", ErrNotMigrated,
			version.Version, map[bool]string{true: ", dirty", false: ""}[version.Dirty], migrations.Latest)
	}
	w.schema = table.Schema
	w.channel, w.control = queue.Channels(table.Schema)
	w.queueSlots = map[string]*semaphore.Weighted{}
	w.queueLimits = map[string]RateLimit{}
	for _, q := range w.cfg.Queues {
		w.wakes[q] = make(chan struct{}, 1)
		if n, ok := w.cfg.QueueConcurrency[q]; ok {
			w.queueSlots[q] = semaphore.NewWeighted(int64(n))
		}
	}
	for _, r := range w.cfg.RateLimits {
		if r.Queue != "" {
			w.queueLimits[r.Queue] = r
		} else {
			w.nameLimits = append(w.nameLimits, r)
			w.limitedNames = append(w.limitedNames, r.Name)
		}
	}

	w.classOID = table.Oid
	w.slots = semaphore.NewWeighted(int64(w.cfg.Concurrency))
	w.slotFreed = make(chan struct{}, 1)
	w.comp = newCompleter(w)

	if w.lease {
		w.lockSessionUp(1, 0)
		return nil
	}
	if entries, err := w.queries.SchemaLockTableSize(ctx, w.pool); err == nil && int64(w.cfg.Concurrency) > entries/4 {
		w.log.Warn("skiplock: Concurrency is a large share of PostgreSQL's lock table, which every running task's advisory lock "+
			"and every session's locks share; past it, claims back off. Lower Concurrency, run fewer workers, or raise max_locks_per_transaction.",
			"concurrency", w.cfg.Concurrency, "lock_table_entries", entries)
	}
	w.ls = newLockSession(w.pool.Config().ConnConfig, int32(uint32(table.Oid)), table.Oid, w.log)
	w.ls.onLost = w.lockSessionLost
	w.ls.onUp = w.lockSessionUp
	if err := w.ls.connect(ctx); err != nil {
		return fmt.Errorf("skiplock: opening the lock session: %w", err)
	}
	return nil
}

func (w *Worker) lockSessionUp(gen uint64, backendPID uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := w.queries.WorkerRegister(ctx, w.pool, db.WorkerRegisterParams{
		ID: w.cfg.WorkerID, Host: w.host, Pid: int32(w.pid), Queues: w.cfg.Queues, LockBackendPid: int32(backendPID),
	})
	if err != nil {
		w.log.Warn("skiplock: registering worker", "error", err)
	}
	if gen > 1 {
		w.cfg.Observer.LockSessionReconnected()
		w.wakeAll()
	}
}

// lockSessionLost cancels the handlers whose locks died with the session:
// their tasks are now free for the rescuer and other workers.
func (w *Worker) lockSessionLost(gen uint64) {
	cancelled := 0
	for _, e := range w.inflightSnapshot() {
		if e.gen == gen {
			w.cancelExecution(e, errLockLost)
			cancelled++
		}
	}
	w.cfg.Observer.LockSessionLost(cancelled)
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

func (w *Worker) wake(queueName string) {
	if ch, ok := w.wakes[queueName]; ok {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (w *Worker) wakeAll() {
	for q := range w.wakes {
		w.wake(q)
	}
}

// shutdown waits for running handlers for up to ShutdownGrace, then cancels
// the rest; it returns once every execution has an outcome.
func (w *Worker) shutdown() {
	done := make(chan struct{})
	go func() {
		w.settled.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(w.cfg.ShutdownGrace):
	}
	running := w.inflightSnapshot()
	w.log.Warn("skiplock: shutdown grace period over; cancelling running tasks, which go back to pending", "count", len(running))
	for _, e := range running {
		w.cancelExecution(e, errShutdown)
	}
	<-done
}

// Run runs handlers on the database in DATABASE_URL with the default Config
// until SIGINT or SIGTERM, then shuts down gracefully. It is the whole main
// of a consumer binary:
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("skiplock: DATABASE_URL: %w", err)
	}
	defer pool.Close()
	return New(pool, Config{}).Run(ctx, handlers)
}

func handlerNames(h Handlers) []string {
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// queueTask converts a claimed row for handlers.
func queueTask(r db.TaskClaimRow) *Task {
	return &Task{
		ID:          r.ID,
		Name:        r.Name,
		Queue:       r.Queue,
		Payload:     r.Payload,
		Metadata:    r.Metadata,
		Priority:    int(r.Priority),
		Attempt:     int(r.Attempt),
		MaxAttempts: int(r.MaxAttempts),
		CreatedAt:   r.CreatedAt,
		RunAt:       r.RunAt,
		StartedAt:   derefTime(r.StartedAt),
	}
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
