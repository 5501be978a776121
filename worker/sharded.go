package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/connstr"
	"github.com/skiplock/skiplock/internal/shard"
	"github.com/skiplock/skiplock/queue"
)

// ShardedWorker runs the tasks of a sharded queue (queue.ShardedClient):
// one Worker per shard in one process, each with its own lock session
// (or leases, in ModeLease), listener, claim loops, rescuer and elections
// on its shard's database, as if it were alone, sharing the process's
// Concurrency (NewSharded). Create it with NewSharded and start it with
// Run.
type ShardedWorker struct {
	shards  []int // ascending
	workers map[int]*Worker
	pools   map[int]*pgxpool.Pool
	logs    map[int]*slog.Logger

	mu       sync.Mutex
	started  bool
	stop     chan struct{} // closed by Stop and StopAndCancel
	stopOnce sync.Once
	ran      chan struct{} // closed when a started Run returns
}

// NewSharded returns a ShardedWorker on the databases of shards, each
// named by its shard number as for queue.NewSharded. cfg applies to the
// Worker of every shard, except:
//
//   - Concurrency, when set, is the process's, shared by the shards: it
//     holds at most Concurrency tasks in all, and must be at least the
//     number of shards. Each shard's share is an even split of it (the
//     first ones take the remainder). A shard with work takes the slots
//     of shards without (all but one slot of each), and gives them back
//     as its tasks end once they have work again: with work on every
//     shard, each runs its share. Left at zero, each shard's Worker sizes
//     its own, as a Worker does: each shard is a server of its own, with
//     its own lock table.
//   - ClaimBatch, when set, is at most each shard's share of Concurrency,
//     and defaults to half of it.
//   - Periodic tasks are enqueued by the Worker of the lowest shard only,
//     so that each tick is enqueued once; the schedules stored in each
//     shard's database (queue.Client.SetSchedule) run on that shard.
//   - Logger gets a "shard" attribute for each Worker.
//   - WorkerID, when empty, is chosen once: the process has one ID on
//     every shard.
//
// Everything else is per shard: QueueConcurrency caps a queue on each
// shard's Worker, and concurrency limits, rate limits, exclusive keys and
// sequences hold within a shard. ListenURL names one database, so it is
// refused.
func NewSharded(shards map[int]*pgxpool.Pool, cfg Config) (*ShardedWorker, error) {
	if len(shards) == 0 {
		return nil, errors.New("skiplock: NewSharded needs at least one shard")
	}
	if cfg.ListenURL != "" {
		return nil, errors.New("skiplock: NewSharded: Config.ListenURL names one database; a sharded worker has one per shard and cannot take it")
	}
	s := &ShardedWorker{
		workers: map[int]*Worker{}, pools: map[int]*pgxpool.Pool{}, logs: map[int]*slog.Logger{},
		stop: make(chan struct{}), ran: make(chan struct{}),
	}
	for n, pool := range shards {
		if err := shard.Check(n); err != nil {
			return nil, fmt.Errorf("skiplock: NewSharded: %w", err)
		}
		if pool == nil {
			return nil, fmt.Errorf("skiplock: NewSharded: shard %d has no pool", n)
		}
		s.shards = append(s.shards, n)
	}
	slices.Sort(s.shards)
	if cfg.Concurrency < 0 || (cfg.Concurrency > 0 && cfg.Concurrency < len(s.shards)) {
		return nil, fmt.Errorf("skiplock: NewSharded: Config.Concurrency %d is less than the %d shards: each shard's worker needs at least one",
			cfg.Concurrency, len(s.shards))
	}
	if cfg.WorkerID == "" {
		d, err := cfg.withDefaults()
		if err != nil {
			return nil, err
		}
		cfg.WorkerID = d.WorkerID
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	var shared *sharedSlots
	if cfg.Concurrency > 0 {
		// The even split is each shard's share, and sizes its claims
		// (ClaimBatch) as it would a Worker's of that Concurrency.
		shares, batches := make([]int, len(s.shards)), make([]int, len(s.shards))
		for i := range s.shards {
			shares[i] = cfg.Concurrency / len(s.shards)
			if i < cfg.Concurrency%len(s.shards) {
				shares[i]++
			}
			batches[i] = min(max(shares[i]/2, 1), maxClaimBatch)
			if cfg.ClaimBatch > 0 {
				batches[i] = min(cfg.ClaimBatch, shares[i])
			}
		}
		shared = newSharedSlots(cfg.Concurrency, shares, batches)
	}
	for i, n := range s.shards {
		c := cfg
		if shared != nil {
			c.ClaimBatch = shared.shards[i].batch()
		}
		if i > 0 {
			c.Periodic = nil
		}
		c.Logger = logger.With("shard", n)
		s.logs[n] = c.Logger
		s.pools[n] = shards[n]
		s.workers[n] = New(shards[n], c)
		if shared != nil {
			s.workers[n].slots = shared.shards[i]
		}
	}
	return s, nil
}

// Shards returns the shard numbers, ascending.
func (s *ShardedWorker) Shards() []int { return slices.Clone(s.shards) }

// Run runs handlers on every shard until ctx ends (or Stop), then shuts
// every shard's Worker down gracefully and returns once all have, as
// Worker.Run does. Before a shard's Worker starts, Run reads the shard's
// stamp (migrations.SetShard) and refuses a database stamped with another
// number, or not stamped: an error wrapping queue.ErrShardMismatch. A
// shard whose database cannot be reached, at start or later, is waited
// for by its own Worker, with backoff, while the others run. A configuration error of one shard (a mismatched stamp,
// a schema not migrated, a login refused) stops them all: Run returns it,
// naming the shard.
func (s *ShardedWorker) Run(ctx context.Context, handlers Handlers) error {
	if len(handlers) == 0 {
		return ErrNoHandlers
	}
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return ErrAlreadyRunning
	}
	s.started = true
	s.mu.Unlock()
	defer close(s.ran)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, len(s.shards)) // in shard order
	for i, n := range s.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.runShard(ctx, n, handlers); err != nil {
				errs[i] = fmt.Errorf("shard %d: %w", n, err)
				cancel() // stop the others
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runShard checks shard n's stamp, waiting for its database as a starting
// Worker does, then runs its Worker.
func (s *ShardedWorker) runShard(ctx context.Context, n int, handlers Handlers) error {
	var stamp int
	o := &outage{log: s.logs[n], what: "reading the shard's stamp"}
	err := untilAvailable(ctx, o, s.pools[n], func(ctx context.Context) (err error) {
		stamp, err = shard.Stamp(ctx, s.pools[n])
		return err
	})
	if ctx.Err() != nil {
		return nil // stopped while waiting: nothing ran
	}
	if err != nil {
		return err
	}
	if stamp != n {
		if stamp == 0 {
			return fmt.Errorf("%w: shard %d's database is not stamped: run migrations.SetShard on it with %d", queue.ErrShardMismatch, n, n)
		}
		return fmt.Errorf("%w: shard %d's database is stamped as shard %d", queue.ErrShardMismatch, n, stamp)
	}
	return s.workers[n].Run(ctx, handlers)
}

// Stop shuts every shard's Worker down gracefully, as the end of Run's
// context does, and returns once Run has returned, or ctx's error if ctx
// ends first.
func (s *ShardedWorker) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stop) })
	return s.waitRun(ctx)
}

// StopAndCancel shuts every shard's Worker down without the grace
// period, as Worker.StopAndCancel does.
func (s *ShardedWorker) StopAndCancel(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, w := range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.StopAndCancel(ctx) // waitRun reports the end
		}()
	}
	s.stopOnce.Do(func() { close(s.stop) })
	wg.Wait()
	return s.waitRun(ctx)
}

func (s *ShardedWorker) waitRun(ctx context.Context) error {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-s.ran:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RunSharded is Run for a sharded queue: it runs handlers on the database
// of each shard, named by its number in urls, with the default Config,
// until SIGINT or SIGTERM, then shuts down gracefully; a second signal
// cancels the handlers still running. A shard that cannot be reached is
// waited for while the others run.
func RunSharded(urls map[int]string, handlers Handlers) error {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	pools := map[int]*pgxpool.Pool{}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for n, url := range urls {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			return connstr.Error(fmt.Errorf("skiplock: the URL of shard %d: %w", n, err), connstr.Passwords(url)...)
		}
		pools[n] = pool
	}
	s, err := NewSharded(pools, Config{})
	if err != nil {
		return err
	}
	defer stopOnSignals(signals, s.Stop, s.StopAndCancel)()
	return s.Run(context.Background(), handlers)
}
