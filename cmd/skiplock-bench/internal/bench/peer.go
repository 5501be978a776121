package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/cpustat"
)

// The peer line is skiplock's side of `skiplock-bench compare` (package
// internal/compare), which runs River, Graphile Worker and the bare SQL
// cycle on fresh databases of the same server, interleaved with it, and
// reads its rate from the last work_per_s=NUMBER line. The compare runs it
// in a process of its own; an older build's peer line runs beside it with
// -also 'before=/path/to/old-bench --peer-line':
//
//	PEER_N=50000 PEER_DSN=postgres://.../compare_skiplock skiplock-bench --peer-line [--peer-enqueue single]
//
// It migrates the (fresh) database, enqueues PEER_N no-op tasks before any
// worker starts, by EnqueueMany or by 16 producers calling Enqueue, and
// with no VACUUM in between (a backlog that has just arrived has not been
// vacuumed, and the peers are measured that way). Then one worker with
// default Config works them in this process; the clock runs from Run's
// start until Run has returned, which it does only once every outcome is
// committed. The writes the work cost (heap tuples, WAL) are printed too.

// Peer enqueue paths.
const (
	PeerEnqueueMany   = "many"
	PeerEnqueueSingle = "single"
)

// PeerOptions configures PeerLine.
type PeerOptions struct {
	// N tasks; DSN is the database (fresh, empty). Default: PEER_N and
	// PEER_DSN.
	N   int
	DSN string
	// Enqueue is PeerEnqueueMany (default) or PeerEnqueueSingle.
	Enqueue string
	// Producers call Enqueue at once on the single path (default 16).
	Producers int
	// Concurrency and ClaimBatch of the worker's Config; zero keeps the
	// defaults, which the comparison measures.
	Concurrency, ClaimBatch int
	// DeleteCompleted sets the worker's Config.DeleteCompleted: the line
	// then measures a worker that keeps no completed tasks.
	DeleteCompleted bool
	// SchemaSQL, an experiment, runs once the database is migrated
	// (--schema-sql): the line then measures the schema it leaves.
	SchemaSQL string
}

// PeerLine runs the peer line and prints key=value lines to stdout,
// work_per_s last. Progress goes to stderr.
func PeerLine(ctx context.Context, o PeerOptions, stdout, stderr io.Writer) error {
	if o.N == 0 {
		n, err := strconv.Atoi(os.Getenv("PEER_N"))
		if err != nil || n <= 0 {
			return fmt.Errorf("peer line: PEER_N must be a positive number of tasks, got %q", os.Getenv("PEER_N"))
		}
		o.N = n
	}
	if o.DSN == "" {
		o.DSN = os.Getenv("PEER_DSN")
		if o.DSN == "" {
			return errors.New("peer line: PEER_DSN is not set")
		}
	}
	if o.Enqueue == "" {
		o.Enqueue = PeerEnqueueMany
	}
	if o.Enqueue != PeerEnqueueMany && o.Enqueue != PeerEnqueueSingle {
		return fmt.Errorf("peer line: enqueue must be %s or %s, got %q", PeerEnqueueMany, PeerEnqueueSingle, o.Enqueue)
	}
	if o.Producers == 0 {
		o.Producers = DefaultProducers
	}
	cfg, err := pgxpool.ParseConfig(o.DSN)
	if err != nil {
		return fmt.Errorf("peer line: %w", err)
	}
	if o.Enqueue == PeerEnqueueSingle {
		cfg.MaxConns = int32(o.Producers)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("peer line: %w", err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return fmt.Errorf("peer line: migrating: %w", err)
	}
	if o.SchemaSQL != "" {
		if _, err := pool.Exec(ctx, o.SchemaSQL); err != nil {
			return fmt.Errorf("peer line: --schema-sql: %w", err)
		}
	}

	fmt.Fprintf(stderr, "skiplock peer line: enqueueing %d tasks (%s)\n", o.N, o.Enqueue)
	start := time.Now()
	if err := peerEnqueue(ctx, pool, o); err != nil {
		return err
	}
	enqueued := time.Since(start)
	before, err := readWrites(ctx, pool)
	if err != nil {
		return err
	}

	// The worker gets a pool of its own, as an application's would.
	wpool, err := pgxpool.New(ctx, o.DSN)
	if err != nil {
		return fmt.Errorf("peer line: %w", err)
	}
	var done atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	n := int64(o.N)
	handlers := worker.Handlers{noopTask: func(context.Context, *worker.Task) error {
		if done.Add(1) == n {
			once.Do(func() { close(all) })
		}
		return nil
	}}
	w := worker.New(wpool, worker.Config{
		Concurrency: o.Concurrency, ClaimBatch: o.ClaimBatch, DeleteCompleted: o.DeleteCompleted,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	fmt.Fprintf(stderr, "skiplock peer line: working\n")
	workStart, cpu := time.Now(), cpustat.Start()
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(runCtx, handlers) }()
	select {
	case <-all:
		stop() // Run writes the last outcomes and returns
		err = <-runErr
	case err = <-runErr:
	case <-ctx.Done():
		stop()
		<-runErr
		err = ctx.Err()
	}
	elapsed := time.Since(workStart)
	var cpuOut strings.Builder
	cpu.Report(&cpuOut, o.N)
	wpool.Close()
	if err != nil {
		return fmt.Errorf("peer line: worker: %w", err)
	}
	completed, err := countCompleted(ctx, pool, int64(o.N), o.DeleteCompleted)
	if err != nil {
		return err
	}
	if completed != int64(o.N) || done.Load() != n {
		return fmt.Errorf("peer line: %d handlers ran and %d tasks are completed, want %d", done.Load(), completed, o.N)
	}
	after, err := readWritesSettled(ctx, pool, before)
	if err != nil {
		return err
	}
	per := func(v float64) string { return strconv.FormatFloat(v/float64(o.N), 'f', 2, 64) }
	fmt.Fprintf(stdout, "system=skiplock n=%d enqueue=%s enqueue_per_s=%.0f\n", o.N, o.Enqueue, float64(o.N)/enqueued.Seconds())
	fmt.Fprintf(stdout, "work: heap_tuples_per_task=%s (inserted %s, updated %s, of which HOT %s, deleted %s) wal_bytes_per_task=%s (server-wide)\n",
		per(after.ins+after.upd+after.del-before.ins-before.upd-before.del), per(after.ins-before.ins), per(after.upd-before.upd),
		per(after.hot-before.hot), per(after.del-before.del), per(after.wal-before.wal))
	io.WriteString(stdout, cpuOut.String())
	fmt.Fprintf(stdout, "work_per_s=%.0f\n", float64(o.N)/elapsed.Seconds())
	return nil
}

// peerEnqueue puts the backlog in: one EnqueueMany per 50,000 tasks, or
// Producers goroutines calling Enqueue.
func peerEnqueue(ctx context.Context, pool *pgxpool.Pool, o PeerOptions) error {
	client := queue.New(pool)
	if o.Enqueue == PeerEnqueueMany {
		const chunk = 50_000
		tasks := make([]queue.NewTask, 0, min(o.N, chunk))
		for done := 0; done < o.N; done += len(tasks) {
			tasks = tasks[:0]
			for i := done; i < min(o.N, done+chunk); i++ {
				tasks = append(tasks, queue.NewTask{Name: noopTask, Payload: benchPayload{N: i}})
			}
			if _, err := client.EnqueueMany(ctx, tasks); err != nil {
				return fmt.Errorf("peer line: EnqueueMany: %w", err)
			}
		}
		return nil
	}
	var next atomic.Int64
	errs := make(chan error, o.Producers)
	var wg sync.WaitGroup
	for range o.Producers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(o.N) {
					return
				}
				if _, err := client.Enqueue(ctx, noopTask, benchPayload{N: int(i)}); err != nil {
					errs <- fmt.Errorf("peer line: Enqueue: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// writes are the database's row counters for skiplock_tasks and the
// server's WAL position.
type writes struct {
	ins, upd, hot, del, wal float64
}

func readWrites(ctx context.Context, pool *pgxpool.Pool) (writes, error) {
	var w writes
	err := pool.QueryRow(ctx, `SELECT t.n_tup_ins::float8, t.n_tup_upd::float8, t.n_tup_hot_upd::float8, t.n_tup_del::float8,
			(SELECT wal_bytes::float8 FROM pg_stat_wal)
		FROM pg_stat_user_tables AS t WHERE t.relid = 'skiplock_tasks'::regclass`).Scan(&w.ins, &w.upd, &w.hot, &w.del, &w.wal)
	if err != nil {
		return w, fmt.Errorf("peer line: reading table statistics: %w", err)
	}
	return w, nil
}

// readWritesSettled reads the counters once the worker's backends, which
// report theirs when they exit, have stopped changing them (at most 5 s).
func readWritesSettled(ctx context.Context, pool *pgxpool.Pool, before writes) (writes, error) {
	deadline := time.Now().Add(5 * time.Second)
	var last writes
	for {
		w, err := readWrites(ctx, pool)
		if err != nil {
			return w, err
		}
		if (w.upd == last.upd && w.upd > before.upd) || time.Now().After(deadline) {
			return w, nil
		}
		last = w
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// countCompleted counts the completed tasks of a finished run of n: the
// completed rows, or, when the workers deleted what they completed, n if
// no row of another status is left (a workflow's tasks are kept whatever
// the setting, so its runs count rows).
func countCompleted(ctx context.Context, pool *pgxpool.Pool, n int64, deleted bool) (int64, error) {
	var completed, left int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status <> 'completed') FROM skiplock_tasks").Scan(&completed, &left); err != nil {
		return 0, err
	}
	if deleted && left == 0 {
		return n, nil
	}
	return completed, nil
}
