package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/cpustat"
	"github.com/skiplock/skiplock/internal/testschema"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// The throughput workload over shards (Options.Shards): each case works
// its backlog in fresh databases rather than a fresh schema, one per shard,
// so that the plain case and the sharded ones are set up alike. Shards 0 is
// the plain baseline: one database, not stamped, filled by a queue.Client
// and worked by worker.New. Shards n >= 1 is n databases stamped 1..n
// (migrations.SetShard), filled evenly through a queue.ShardedClient
// (Shard(k).EnqueueMany: EnqueueMany is per shard) and worked by one worker
// process running worker.NewSharded over them. The clock runs from the
// worker's start until every database shows nothing pending or running.

// shardCases are the throughput cases over shards: every task count and
// concurrency with every value of Options.Shards, their runs alternating.
func (b *bencher) shardCases() []benchCase {
	var cases []benchCase
	for _, n := range b.opts.Tasks {
		for _, conc := range b.opts.Concurrency {
			for _, shards := range b.opts.Shards {
				name := fmt.Sprintf("tasks=%d", n)
				if shards == 0 {
					name += " plain"
				} else {
					name += fmt.Sprintf(" shards=%d", shards)
				}
				if conc != 0 {
					name += fmt.Sprintf(" concurrency=%d", conc)
				}
				if b.opts.Vacuum {
					name += " vacuumed"
				}
				params := map[string]float64{"tasks": float64(n), "procs": 1, "concurrency": float64(concurrencyOf(conc)), "shards": float64(shards)}
				cases = append(cases, benchCase{workload: WorkloadThroughput, name: name, params: params,
					run: func(ctx context.Context, run int) ([]measure, error) {
						return b.workShards(ctx, n, shards, conc, WorkloadThroughput+" "+name+runLabel(run, b.opts.Runs))
					}})
			}
		}
	}
	return cases
}

// shardDatabase is one fresh database of a shards case and a pool on it.
type shardDatabase struct {
	server string // the server's URL
	name   string
	pool   *pgxpool.Pool
}

// newDatabase creates and migrates a database on server.
func (b *bencher) newDatabase(ctx context.Context, server, name string) (*shardDatabase, error) {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	conn.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("creating database %s: %w", name, err)
	}
	if b.opts.databaseMade != nil {
		b.opts.databaseMade(name)
	}
	d := &shardDatabase{server: server, name: name}
	cfg, err := pgxpool.ParseConfig(server)
	if err == nil {
		cfg.ConnConfig.Database = name
		cfg.MaxConns = 4
		d.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	}
	if err == nil {
		err = migrations.Up(ctx, d.pool)
	}
	if err != nil {
		d.drop()
		return nil, fmt.Errorf("preparing database %s: %w", name, err)
	}
	return d, nil
}

// drop removes the database, even when the run's context is cancelled.
func (d *shardDatabase) drop() {
	if d.pool != nil {
		d.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.server)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)")
}

// busy reports whether any task is pending or running.
func (d *shardDatabase) busy(ctx context.Context) (bool, error) {
	return (&schema{pool: d.pool}).busy(ctx)
}

// workShards runs one shards case once: shards 0 is the plain baseline.
func (b *bencher) workShards(ctx context.Context, tasks, shards, concurrency int, label string) ([]measure, error) {
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	base := testschema.Name(schemaPrefix, hex.EncodeToString(tag[:]))
	servers := b.opts.ShardServers
	if len(servers) == 0 {
		servers = []string{b.env.url}
	}
	numbers := []int{0}
	if shards > 0 {
		numbers = numbers[:0]
		for n := 1; n <= shards; n++ {
			numbers = append(numbers, n)
		}
	}
	dbs := map[int]*shardDatabase{}
	defer func() {
		for _, d := range dbs {
			d.drop()
		}
	}()
	pools := map[int]*pgxpool.Pool{}
	for i, n := range numbers {
		b.prog.status("%s: creating database %d of %d", label, i+1, len(numbers))
		d, err := b.newDatabase(ctx, servers[i%len(servers)], base+"_"+strconv.Itoa(n))
		if err != nil {
			return nil, err
		}
		dbs[n] = d
		pools[n] = d.pool
		if n > 0 {
			if err := migrations.SetShard(ctx, d.pool, n); err != nil {
				return nil, err
			}
		}
	}

	// The backlog, spread evenly: task i to the (i mod shards)-th shard.
	share := map[int]int{}
	var enqueue func(ctx context.Context, n int, ts []queue.NewTask) error
	if shards == 0 {
		client := queue.New(pools[0])
		enqueue = func(ctx context.Context, _ int, ts []queue.NewTask) error {
			_, err := client.EnqueueMany(ctx, ts)
			return err
		}
	} else {
		sc, err := queue.NewSharded(pools)
		if err != nil {
			return nil, err
		}
		enqueue = func(ctx context.Context, n int, ts []queue.NewTask) error {
			c, err := sc.Shard(n)
			if err != nil {
				return err
			}
			ids, err := c.EnqueueMany(ctx, ts)
			if err == nil && len(ids) > 0 && queue.ShardOf(ids[0].ID) != n {
				err = fmt.Errorf("shard %d handed out task ID %d of shard %d", n, ids[0].ID, queue.ShardOf(ids[0].ID))
			}
			return err
		}
	}
	const chunk = 50_000
	for i, n := range numbers {
		mine := tasks / len(numbers)
		if i < tasks%len(numbers) {
			mine++
		}
		share[n] = mine
		for done := 0; done < mine; {
			ts := noopTasks(done, min(mine, done+chunk))
			if err := enqueue(ctx, n, ts); err != nil {
				return nil, fmt.Errorf("preloading shard %d: %w", n, err)
			}
			done += len(ts)
			b.prog.status("%s: preloading database %d of %d, %s/%s tasks", label, i+1, len(numbers), formatNumber(float64(done)), formatNumber(float64(mine)))
		}
		if b.opts.Vacuum {
			if _, err := pools[n].Exec(ctx, "VACUUM (ANALYZE) skiplock_tasks"); err != nil {
				return nil, fmt.Errorf("vacuum: %w", err)
			}
		}
	}

	spec := workerSpec{Concurrency: concurrency, Mode: b.opts.Mode, DeleteCompleted: b.opts.DeleteCompleted,
		Settings: b.opts.WorkerSettings, LockSettings: b.opts.LockSessionSettings, Databases: map[int]shardDB{}}
	for n, d := range dbs {
		spec.Databases[n] = shardDB{URL: d.server, Database: d.name}
	}
	ps, err := startProcs(ctx, b.opts.Self, 1, spec, b.opts.Progress)
	if err != nil {
		return nil, err
	}
	defer ps.stop()

	cpu0, machine0 := ps.cpu(), cpustat.MachineBusy()
	start := time.Now()
	if err := ps.start(); err != nil {
		return nil, err
	}
	stopProgress := b.prog.track(func() string {
		n := ps.done()
		return fmt.Sprintf("%s: %s/%s tasks, %s/s", label, formatNumber(float64(n)), formatNumber(float64(tasks)),
			formatNumber(rate(n, time.Since(start))))
	})
	defer stopProgress()
	lastN, lastChange := int64(0), time.Now()
wait:
	for {
		if err := ps.failed(); err != nil {
			return nil, err
		}
		n := ps.done()
		if n >= int64(tasks) {
			idle := true
			for _, d := range dbs {
				busy, err := d.busy(ctx)
				if err != nil {
					return nil, err
				}
				idle = idle && !busy
			}
			if idle {
				break wait
			}
		}
		if n != lastN {
			lastN, lastChange = n, time.Now()
		} else if time.Since(lastChange) > time.Minute {
			return nil, fmt.Errorf("no progress for a minute at %d of %d tasks", n, tasks)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	workerCPU, machineCPU := ps.cpu()-cpu0, cpustat.MachineBusy()-machine0
	rss := ps.rss()
	stopProgress()
	if err := ps.stop(); err != nil {
		return nil, err
	}
	for n, d := range dbs {
		completed, err := countCompleted(ctx, d.pool, int64(share[n]), b.opts.DeleteCompleted)
		if err != nil {
			return nil, err
		}
		if completed != int64(share[n]) {
			return nil, fmt.Errorf("database of shard %d: %d of %d tasks completed", n, completed, share[n])
		}
	}
	return []measure{
		{metric: "throughput", unit: "tasks/s", value: rate(int64(tasks), elapsed)},
		{metric: "elapsed", unit: "s", value: elapsed.Seconds()},
		{metric: "worker CPU", unit: "µs/task", value: float64(workerCPU.Microseconds()) / float64(tasks)},
		{metric: "machine idle", unit: "%", value: 100 * max(1-machineCPU.Seconds()/(elapsed.Seconds()*float64(runtime.NumCPU())), 0)},
		{metric: "worker RSS", unit: "MiB", value: mib(rss)},
	}, nil
}
