package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/skiplock/skiplock/queue"
)

// DefaultConcurrency is the Concurrency of a worker whose Config leaves it
// at zero until the worker has measured its round trip and the server's
// lock table, and the least it then sizes it to (Config.Concurrency).
const DefaultConcurrency = 500

// Defaults and limits of Config; each field's doc gives its default.
const (
	maxClaimBatch          = 1000
	defaultPollInterval    = time.Second
	defaultTaskTimeout     = time.Minute
	defaultAbandonAfter    = 10 * time.Second
	defaultShutdownGrace   = 30 * time.Second
	defaultRescueInterval  = time.Second
	defaultHealthInterval  = time.Second
	defaultLeaseDuration   = 30 * time.Second
	defaultRetainCompleted = 24 * time.Hour
	defaultRetainFailed    = 7 * 24 * time.Hour
	defaultRetainCancelled = 7 * 24 * time.Hour
	defaultRetainAudit     = 90 * 24 * time.Hour
	// Dead-peer detection on the lock session; see Config.TCPKeepaliveIdle.
	defaultTCPKeepaliveIdle     = 5 * time.Second
	defaultTCPKeepaliveInterval = 2 * time.Second
	defaultTCPKeepaliveCount    = 3
	defaultTCPUserTimeout       = 10 * time.Second
	defaultPingTimeout          = 5 * time.Second
	defaultStaleAfter           = 15 * time.Second
	defaultMaxCrashes           = 3
	maxRetryBackoff             = time.Hour // DefaultRetryBackoff's cap
)

// Mode is how a running task is guarded against a second claim, and how a
// dead worker is told from a slow one.
type Mode int

const (
	// ModeAdvisory guards each running task with a session-level advisory
	// lock on the worker's lock session. A dead worker's tasks are rescued
	// within about RescueInterval of its session ending. It needs real
	// sessions: a direct connection, or a pooler in session mode.
	ModeAdvisory Mode = iota
	// ModeLease guards each running task with a lease (locked_until) that
	// the worker's heartbeat renews every LeaseDuration/3. A dead worker's
	// tasks are rescued within about LeaseDuration. It works through
	// PgBouncer in transaction mode, where sessions do not exist.
	ModeLease
)

func (m Mode) String() string {
	if m == ModeLease {
		return "lease"
	}
	return "advisory"
}

// Config tunes a Worker. The zero value is usable: every field has a default.
type Config struct {
	// Mode chooses advisory locks (the default) or leases. Advisory mode
	// refuses to start where connections are pooled per transaction.
	Mode Mode

	// LeaseDuration is, in lease mode, how long a claim lasts without its
	// worker's heartbeat: the time to detect a dead worker. Defaults to
	// 30s; at least 1s.
	LeaseDuration time.Duration

	// ListenURL is, in lease mode, a direct connection (not through the
	// pooler) for LISTEN, which a transaction pooler cannot carry. Without
	// it a lease-mode worker polls (PollInterval) and cancellation requests
	// arrive by poll (HealthInterval).
	ListenURL string

	// Concurrency is how many tasks this process holds at once, across its
	// queues: running, or finished with their outcome not yet written. It
	// sizes claims (ClaimBatch): one claim of many tasks costs far less per
	// task than many claims of a few. In advisory mode each
	// running task holds one advisory lock, and the server's lock table
	// (max_locks_per_transaction × max_connections, about 6,400 entries by
	// default, shared by every session) bounds the total across every
	// worker; Run warns when Concurrency alone takes more than a quarter of
	// it.
	//
	// Left at zero, the worker sizes it itself, every few seconds: 1,000
	// on a local network at start and 2,000 from its measurement half a
	// second later (workers started together see each other by then),
	// and more once the measured round trip to the server calls for it
	// (each task is held for two round trips, its claim's and its
	// outcome's: 500 plus 500 per 0.5 ms, 3,000 at 2.5 ms), at most 3,200, and
	// never more than this worker's share of half the server's lock
	// table among the workers whose heartbeat is recent (but never below
	// 500). Set it to fix how many handlers may run at once.
	Concurrency int

	// Queues are the queues this worker claims from. Defaults to
	// ["default"].
	Queues []string

	// QueueConcurrency caps how many tasks of a queue run at once in this
	// process, within Concurrency. Queues not listed share Concurrency. It
	// is per process: for a cap across every worker, set a concurrency
	// limit (queue.Client.SetLimit, `skiplock limit set`).
	QueueConcurrency map[string]int

	// RateLimits bound how many tasks start per window, across every
	// worker that declares the same limit, and only those: the count is a
	// row every worker shares, but a limit is configuration, so a worker
	// that does not declare it claims the tasks freely and its starts are
	// not counted. Declare a limit, with the same Limit and Per, in every
	// worker that handles its tasks (each claim takes budget by its own
	// worker's Limit and Per). A concurrency limit (queue.Client.SetLimit,
	// `skiplock limit set`) is a row in the database instead, and binds
	// every worker. Tasks over a limit stay pending until the next
	// window; they are neither failed nor lost.
	RateLimits []RateLimit

	// ClaimBatch bounds how many tasks one claim takes; a claim never
	// takes more than the free capacity. A task keeps its slot until its
	// outcome is written, so half of Concurrency lets one batch be
	// claimed while the last one's outcomes are written. Defaults to
	// Concurrency/2, at most 1000 (the most ClaimBatch may be); with
	// Concurrency sized by the worker, half of its window.
	ClaimBatch int

	// ParallelClaims lets this worker's claims run at the same time as
	// other workers' claims of the same queue. By default (advisory mode)
	// claims of a queue take turns across every worker process: each waits
	// up to 200 ms for the one before it to commit, and then finds the rows
	// it took already running instead of walking past them. On two cores,
	// 8 processes drained 1.13-1.18x faster in turns than at once. In
	// turns, one queue's claim rate is that of one claim statement at a
	// time, whatever the server's cores (a claim of about 250 rows took
	// 3.5-5 ms on one such machine: some 50,000-70,000 tasks/s); set
	// ParallelClaims where many processes claim one queue on a database
	// server with many cores. Lease mode claims in parallel.
	ParallelClaims bool

	// PollInterval is how long a queue's claim loop waits after its last
	// claim before it looks for due tasks without being notified: delayed
	// tasks and retries become due this way. A loop that claims more often
	// than that never polls. Defaults to 1s.
	PollInterval time.Duration

	// TaskTimeout bounds each attempt whose task sets no timeout of its own:
	// the handler's context is cancelled after it. Negative means no
	// timeout. Defaults to 1m.
	TaskTimeout time.Duration

	// AbandonAfter is how long a handler may run on after its context
	// was cancelled (timeout, shutdown, lost lock session). Past it the
	// task is recorded as abandoned, its lock released and its slot
	// reused; the goroutine cannot be killed and is left to end on its
	// own. Defaults to 10s.
	AbandonAfter time.Duration

	// ShutdownGrace is how long a graceful shutdown lets running handlers
	// finish before cancelling them. Tasks cancelled by shutdown go back to
	// pending without spending an attempt. Defaults to 30s.
	ShutdownGrace time.Duration

	// RetryBackoff returns how long to wait before retrying a task whose
	// attempt (1-based) failed, for the names Retry gives no Backoff.
	// Defaults to DefaultRetryBackoff. See Retry for the whole model.
	RetryBackoff func(attempt int) time.Duration

	// Retry sets the retry policy of tasks by name; a typed task's name is
	// its TaskName (Retry[Email{}.TaskName()]). This is the one retry
	// model, for typed and untyped handlers alike. An attempt that failed
	// (an error, a timeout or a panic, as OnError or OnPanic left it, or a
	// handler abandoned) fails the task for good if it was Permanent or
	// the task's own max attempts (queue.WithMaxAttempts, a typed task's
	// TaskOptions) are spent; else if Retry[name].MaxAttempts
	// is positive and reached, the task fails for good too, its history
	// saying the policy stopped it; else the task runs again after, first
	// found: the delay of RetryAfter(d, err) if the handler or hook
	// returned one, Retry[name].Backoff(attempt), RetryBackoff(attempt),
	// DefaultRetryBackoff(attempt). Snooze, Cancel, a shutdown and a lost
	// lock are not failures of the task and follow none of this.
	Retry map[string]RetryPolicy

	// OnError, if set, is called when a handler returns an error, a
	// timeout included (OutcomeOf(ctx, err) tells), before the attempt is
	// recorded; its return stands for the handler's: err as it is for the
	// default (a retry with backoff while attempts last), Permanent(err) to
	// fail now, Cancel(err) to cancel, Snooze(d) to try again after d
	// without spending the attempt, RetryAfter(d, err) to retry after d,
	// nil to complete the task. ctx is the
	// handler's, maybe cancelled already (context.Cause says why). It is
	// not called for success, a Snooze or Cancel from the handler, nor for
	// attempts ended by shutdown, a lost lock or a cancellation request,
	// which are not the task's doing. It runs on the handler's goroutine
	// and must be safe for concurrent use; a panic in it is logged and the
	// attempt keeps its error.
	OnError func(ctx context.Context, t *Task, err error) error

	// OnPanic is OnError for a handler that panicked: return p for the
	// default (outcome panic, retried while attempts last), or decide as
	// OnError does; Permanent(p) fails the task now, still as a panic.
	OnPanic func(ctx context.Context, t *Task, p *PanicError) error

	// RescueInterval is how often the elected process looks for running
	// tasks whose worker is gone, and how often the others try to take
	// over when it dies. Defaults to 1s. While a look at every running
	// task is slow (a transaction holds the xmin horizon back), the
	// rescuer looks at a span of task ids at a time, less often
	// (docs/OPERATIONS.md, "What the rescuer needs").
	RescueInterval time.Duration

	// MaxCrashes fails a task that was running in MaxCrashes worker
	// processes when they died (killed for memory, a segfault in cgo,
	// os.Exit in a library), with an error that names each death's
	// worker, host and pid; it runs again only when requeued. A rescue
	// charges no attempt, so the tasks that ran beside it lose none.
	// After a first death each of that process's tasks is a suspect,
	// which a worker runs alone, so that a later death counts against
	// that task only (docs/RELIABILITY.md, "Poison tasks"). The elected
	// rescuer's value applies. A lock session lost by a process that
	// lives on is not a death. Defaults to 3; at most 1000. With 1,
	// every task running in a process that dies is failed.
	MaxCrashes int

	// HealthInterval is how often an idle lock session is pinged, so that a
	// session the server ended, or a network that went silent, is noticed
	// and its tasks' handlers cancelled. Defaults to 1s.
	HealthInterval time.Duration

	// PingTimeout bounds a ping (and heartbeat) of the lock session. A
	// ping that gets no answer in time ends the session at once, without
	// waiting for TCP: a worker cut off while idle stops its handlers
	// within HealthInterval + PingTimeout (6s by default). A statement
	// already in flight on a silent network is bounded by TCPUserTimeout
	// and by StaleAfter/2 without any proof that the session lives.
	// Defaults to 5s.
	PingTimeout time.Duration

	// TCPKeepaliveIdle, TCPKeepaliveInterval, TCPKeepaliveCount and
	// TCPUserTimeout ask both ends of the lock session's TCP connection to
	// give up on a silent peer in seconds rather than the operating
	// system's two hours. They are set on the worker's socket and, with
	// set_config, on the server's side of the session (tcp_keepalives_idle,
	// tcp_keepalives_interval, tcp_keepalives_count, tcp_user_timeout: any
	// role may set them). The server matters most: only when it ends the
	// session are the session's task locks released and its tasks rescued.
	//
	// An idle connection is probed after TCPKeepaliveIdle, then every
	// TCPKeepaliveInterval; it is dropped after TCPKeepaliveCount
	// unanswered probes, or once TCPUserTimeout has passed without an
	// answer, whichever comes first. Data sent and not acknowledged for
	// TCPUserTimeout also drops it. With the defaults (5s, 2s, 3, 10s) a
	// dead peer is detected by either side within 5s + 3×2s = 11s, and
	// the rescuer returns its tasks within one RescueInterval more: about
	// 12s. Over a Unix socket none of this applies (nor is it needed).
	// Negative leaves the operating system's setting. Default to 5s, 2s, 3
	// and 10s.
	TCPKeepaliveIdle     time.Duration
	TCPKeepaliveInterval time.Duration
	TCPKeepaliveCount    int
	TCPUserTimeout       time.Duration

	// StaleAfter is the second line of defence against a silent network,
	// one that needs no TCP: each worker writes a heartbeat through its lock
	// session every StaleAfter/5, and the elected rescuer ends
	// (pg_terminate_backend) the lock session of a worker whose heartbeat is
	// older than StaleAfter, which releases its locks, then rescues its
	// tasks as usual. Any worker does the same to a session that holds the
	// rescuer's or the scheduler's election while its heartbeat is stale,
	// and takes the job over. Ending another worker's session needs the same
	// database role as that worker (or superuser; pg_signal_backend with
	// pg_read_all_stats also does, for any session but a superuser's):
	// without it the rescuer logs one warning naming the grant, and the TCP
	// settings above still bound the wait. A worker cut off
	// stops its own handlers well before (see PingTimeout). Negative
	// disables it. Defaults to 15s.
	StaleAfter time.Duration

	// RetainCompleted, RetainFailed and RetainCancelled are how long tasks
	// that finished so stay in the table before the elected worker deletes
	// them, in batches, once a minute: the table stays the size of its
	// backlog and its retention window. Negative keeps them forever.
	// Default to 24h, 7 days and 7 days: failed tasks wait for an operator
	// to requeue them.
	RetainCompleted time.Duration
	RetainFailed    time.Duration
	RetainCancelled time.Duration

	// DeleteCompleted deletes a task that completes in the write that
	// records its outcome, as Graphile Worker and Sidekiq do, instead of
	// keeping it as completed for RetainCompleted. For queues whose
	// completed tasks nobody reads: the task table then holds only the
	// backlog, and a task costs two row versions instead of three, with
	// no index entry for its completion (docs/PERFORMANCE.md has the
	// figures: at 1,000,000 tasks, a fifth faster and 40% less WAL). A
	// deleted task is gone: Get and List no longer find it, it cannot be
	// requeued, and the completed counts and rates of QueueStats and the
	// dashboard leave it out (the worker's Observer still sees it
	// complete). Tasks that something reads after they complete are kept
	// as completed whatever this says: workflow members, sequence tasks,
	// batch members, tasks with a windowed unique key
	// (queue.WithUniqueWindow; every periodic task's tick has one) and
	// tasks that recorded an output (SetOutput). Failed and cancelled tasks
	// are kept as always. Defaults to false.
	DeleteCompleted bool

	// RetainAudit is how long the records of the audit trail (operator
	// changes: queue.Client.AuditLog, `skiplock audit`) stay before the
	// elected worker deletes them, in batches, with the finished tasks.
	// Negative keeps them forever. Defaults to 90 days.
	RetainAudit time.Duration

	// WorkerID names this process in the tasks it runs and in
	// skiplock_workers. Defaults to host-pid-random.
	WorkerID string

	// Logger receives the worker's logs: lifecycle at info, trouble at warn
	// and error. Defaults to slog.Default().
	Logger *slog.Logger

	// Periodic tasks are enqueued on their schedules by one worker elected
	// among those that declare the same set of schedule names; see
	// PeriodicTask.
	Periodic []PeriodicTask

	// Middleware wraps every handler, the first outermost.
	Middleware []Middleware

	// Keyring decrypts the payloads of tasks enqueued by a Client with
	// queue.WithEncryption, before middleware and handlers see them: the
	// Task's Payload and Decode are the plaintext. It also encrypts the
	// periodic tasks this worker enqueues. A task encrypted with a key it
	// lacks (every key, when nil), or whose ciphertext was altered, fails
	// at once, not retried, with an error naming the key ID; add the key
	// and requeue it. Payloads in clear run as they are. Defaults to nil.
	Keyring *queue.Keyring

	// Observer receives the worker's events, for metrics. Defaults to
	// NopObserver.
	Observer Observer

	// MaxOutputSize bounds, in bytes of JSON, the output a task records
	// with SetOutput: past it the task fails for good with an error that
	// says so (ErrOutputTooLarge), and can be requeued once the limit is
	// raised. Outputs are stored in the task's row and read with it.
	// Negative means no limit. Defaults to 32 KiB.
	// The same limit bounds each progress value (SetProgress) and
	// checkpoint (SaveCheckpoint); past it those calls return
	// ErrProgressTooLarge and write nothing.
	MaxOutputSize int

	now func() time.Time // the scheduler's clock; tests move it
	// handoffWait: how long a handed-over outcome waits for a claim to
	// carry it (handoff.go); 0 is handoffWait. Tests lengthen it.
	handoffWait time.Duration
	// scheduleReload is how often the elected scheduler reloads the stored
	// schedules without an announcement; defaultScheduleReload when 0.
	scheduleReload time.Duration
	// tickWindow is how late a periodic tick may be and still be
	// enqueued; onTimeWithin when 0.
	tickWindow time.Duration
	// rescuePassed, if set, is called after each rescue pass of the
	// elected rescuer: a signal for tests.
	rescuePassed func()
	// autoWindow: Concurrency was left at zero, and the worker sizes its
	// window by the round trip (window.go); autoBatch: ClaimBatch too.
	autoWindow, autoBatch bool
}

// RateLimit allows at most Limit tasks to start per window of Per, counted
// in one row of skiplock_rate_limits that every worker on every machine
// shares. Set exactly one of Queue and Name. Windows are fixed and aligned
// to the Unix epoch on the database clock; each attempt counts, retries
// included, since each is a call to whatever the limit protects.
//
// With PerKey, the limit applies to each key on its own: at most Limit
// tasks of Name start per window for each limit key (the key a producer
// set with queue.WithLimitKey, "customer:42" say), counted in a row per
// key of skiplock_rate_keys, so a key over its limit holds back only its
// own tasks. Tasks of the name without a key share one key, the empty
// one. PerKey needs Name.
type RateLimit struct {
	Queue  string // limit the tasks of this queue
	Name   string // limit the tasks with this name, in any queue
	Limit  int
	Per    time.Duration
	PerKey bool // count each limit key on its own (needs Name)
}

// RetryPolicy is how the failed attempts of one task name are retried, in
// the workers whose Config.Retry lists it.
type RetryPolicy struct {
	// Backoff returns how long to wait before retrying after attempt
	// (1-based) failed. Defaults to Config.RetryBackoff.
	Backoff func(attempt int) time.Duration
	// MaxAttempts, when positive, ends the retries after this many
	// attempts, fewer than the task's own max attempts if need be: the task
	// is then failed for good, as by a Permanent error, and its history
	// says the policy stopped it. The task's max attempts are set when it
	// is enqueued (queue.WithMaxAttempts, or its type's TaskOptions), where
	// the rescuer and operators see them; this is for tasks whose producer
	// cannot be changed, such as those enqueued from SQL. Zero: the task's.
	MaxAttempts int
}

func (r RateLimit) key() string {
	if r.Queue != "" {
		return "queue:" + r.Queue
	}
	return "name:" + r.Name
}

// DefaultRetryBackoff waits 1s after the first failed attempt and doubles
// after each, up to an hour, with ±20% jitter so that a burst of
// failures does not retry in lockstep. 25 attempts span about 14 hours.
func DefaultRetryBackoff(attempt int) time.Duration {
	d := maxRetryBackoff
	if attempt <= 13 {
		d = min(time.Second<<max(attempt-1, 0), maxRetryBackoff)
	}
	jitter := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(d) * jitter)
}

func (c Config) withDefaults() (Config, error) {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
		c.autoWindow = true
		c.autoBatch = c.ClaimBatch == 0
	}
	if len(c.Queues) == 0 {
		c.Queues = []string{queue.DefaultQueue}
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = min(max(c.Concurrency/2, 1), maxClaimBatch)
	}
	if c.PollInterval == 0 {
		c.PollInterval = defaultPollInterval
	}
	if c.TaskTimeout == 0 {
		c.TaskTimeout = defaultTaskTimeout
	}
	if c.AbandonAfter == 0 {
		c.AbandonAfter = defaultAbandonAfter
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = defaultShutdownGrace
	}
	if c.RetryBackoff == nil {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.RescueInterval == 0 {
		c.RescueInterval = defaultRescueInterval
	}
	if c.MaxCrashes == 0 {
		c.MaxCrashes = defaultMaxCrashes
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = defaultHealthInterval
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = defaultLeaseDuration
	}
	if c.PingTimeout == 0 {
		c.PingTimeout = defaultPingTimeout
	}
	if c.TCPKeepaliveIdle == 0 {
		c.TCPKeepaliveIdle = defaultTCPKeepaliveIdle
	}
	if c.TCPKeepaliveInterval == 0 {
		c.TCPKeepaliveInterval = defaultTCPKeepaliveInterval
	}
	if c.TCPKeepaliveCount == 0 {
		c.TCPKeepaliveCount = defaultTCPKeepaliveCount
	}
	if c.TCPUserTimeout == 0 {
		c.TCPUserTimeout = defaultTCPUserTimeout
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = defaultStaleAfter
	}
	if c.RetainCompleted == 0 {
		c.RetainCompleted = defaultRetainCompleted
	}
	if c.RetainFailed == 0 {
		c.RetainFailed = defaultRetainFailed
	}
	if c.RetainCancelled == 0 {
		c.RetainCancelled = defaultRetainCancelled
	}
	if c.RetainAudit == 0 {
		c.RetainAudit = defaultRetainAudit
	}
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		c.WorkerID = host + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(rand.Uint64()&0xffffff, 36)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.MaxOutputSize == 0 {
		c.MaxOutputSize = defaultMaxOutputSize
	}

	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("skiplock: worker.Config."+format, args...))
		}
	}
	check(c.Concurrency > 0, "Concurrency must be positive, got %d", c.Concurrency)
	check(c.ClaimBatch > 0 && c.ClaimBatch <= maxClaimBatch, "ClaimBatch must be 1 to %d, got %d", maxClaimBatch, c.ClaimBatch)
	check(c.PollInterval > 0, "PollInterval must be positive, got %s", c.PollInterval)
	check(c.AbandonAfter > 0, "AbandonAfter must be positive, got %s", c.AbandonAfter)
	check(c.ShutdownGrace > 0, "ShutdownGrace must be positive, got %s", c.ShutdownGrace)
	check(c.RescueInterval > 0, "RescueInterval must be positive, got %s", c.RescueInterval)
	check(c.HealthInterval > 0, "HealthInterval must be positive, got %s", c.HealthInterval)
	check(c.MaxCrashes > 0 && c.MaxCrashes <= 1000, "MaxCrashes must be 1 to 1000, got %d", c.MaxCrashes)
	check(c.Mode == ModeAdvisory || c.Mode == ModeLease, "Mode %d is not ModeAdvisory or ModeLease", c.Mode)
	check(c.LeaseDuration >= time.Second, "LeaseDuration must be at least 1s, got %s", c.LeaseDuration)
	check(c.PingTimeout > 0, "PingTimeout must be positive, got %s", c.PingTimeout)
	check(c.StaleAfter < 0 || c.StaleAfter >= 2*c.PingTimeout,
		"StaleAfter must be at least twice PingTimeout (%s), so that a cut-off worker stops its handlers before its session is ended; got %s",
		2*c.PingTimeout, c.StaleAfter)
	check(c.TCPKeepaliveIdle < 0 || c.TCPKeepaliveIdle >= time.Second, "TCPKeepaliveIdle must be at least 1s (or negative: the system's), got %s", c.TCPKeepaliveIdle)
	check(c.TCPKeepaliveInterval < 0 || c.TCPKeepaliveInterval >= time.Second, "TCPKeepaliveInterval must be at least 1s (or negative: the system's), got %s", c.TCPKeepaliveInterval)
	check(c.TCPUserTimeout < 0 || c.TCPUserTimeout >= time.Millisecond, "TCPUserTimeout must be at least 1ms (or negative: the system's), got %s", c.TCPUserTimeout)
	for q, n := range c.QueueConcurrency {
		check(n > 0, "QueueConcurrency[%q] must be positive, got %d", q, n)
	}
	for name, p := range c.Retry {
		check(name != "", "Retry: empty task name")
		check(p.MaxAttempts >= 0, "Retry[%q].MaxAttempts must not be negative, got %d", name, p.MaxAttempts)
	}
	limited := map[string]bool{}
	for i, r := range c.RateLimits {
		check((r.Queue == "") != (r.Name == ""), "RateLimits[%d]: set exactly one of Queue and Name", i)
		check(r.Limit > 0, "RateLimits[%d].Limit must be positive, got %d", i, r.Limit)
		check(r.Limit <= math.MaxInt32, "RateLimits[%d].Limit must be at most %d, got %d", i, math.MaxInt32, r.Limit)
		check(r.Per >= time.Second, "RateLimits[%d].Per must be at least 1s, got %s", i, r.Per)
		check(!r.PerKey || r.Name != "", "RateLimits[%d]: PerKey needs Name: a per-key limit counts the tasks of a name by their limit key (queue.WithLimitKey), not a whole queue", i)
		check(!limited[r.key()], "RateLimits[%d]: %s is limited twice", i, r.key())
		limited[r.key()] = true
	}
	seen := map[string]bool{}
	for _, q := range c.Queues {
		check(q != "" && len(q) <= queue.MaxNameLength, "Queues: queue name must be 1 to %d bytes, got %q", queue.MaxNameLength, q)
		check(!seen[q], "Queues: %q listed twice", q)
		seen[q] = true
	}
	return c, errors.Join(errs...)
}
