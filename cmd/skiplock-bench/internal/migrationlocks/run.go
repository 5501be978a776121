package migrationlocks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testschema"
	"github.com/skiplock/skiplock/migrations"
)

// schemaPrefix marks the measurement's schemas; the number after it is the
// creation time, so a later run sweeps what a killed run left behind.
const schemaPrefix = "skiplock_miglocks_"

// The loops' statements, in the columns of migration 1. The claim takes the
// oldest due task of the queue in the order of skiplock_tasks_claim_idx,
// skipping rows other transactions hold, as the library's claim does.
const (
	enqueueSQL = `INSERT INTO skiplock_tasks (queue, name, payload) VALUES ('default', 'migration-bench', '{}')`
	claimSQL   = `UPDATE skiplock_tasks SET status = 'running', attempt = attempt + 1, started_at = now(), worker_id = 'migration-bench'
WHERE id = (SELECT id FROM skiplock_tasks WHERE queue = 'default' AND status = 'pending' AND run_at <= now()
            ORDER BY queue, priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id`
	completeSQL = `UPDATE skiplock_tasks SET status = 'completed', finished_at = now() WHERE id = $1`
	// The completed tasks finished over the two days before, the pending
	// ones are all due.
	fillFinishedSQL = `INSERT INTO skiplock_tasks (queue, name, payload, status, run_at, attempt, worker_id, created_at, started_at, finished_at)
SELECT 'default', 'migration-bench', jsonb_build_object('n', g), 'completed', t, 1, 'migration-bench-fill', t, t, t + interval '5 ms'
FROM generate_series($1::bigint, $2::bigint) AS g,
     LATERAL (SELECT now() - interval '2 days' + g * (interval '1 day' / $3::bigint)) AS x(t)`
	fillPendingSQL = `INSERT INTO skiplock_tasks (queue, name, payload, status, run_at, created_at)
SELECT 'default', 'migration-bench', jsonb_build_object('n', g), 'pending', t, t
FROM generate_series($1::bigint, $2::bigint) AS g,
     LATERAL (SELECT now() - interval '1 hour' + g * (interval '1 hour' / $3::bigint)) AS x(t)`
)

// Run fills a fresh schema at o.From and measures each migration up to
// o.To; progress lines go to log.
func Run(ctx context.Context, o Options, log io.Writer) (Result, error) {
	res := Result{Finished: o.Finished, Pending: o.Pending}
	if err := testschema.DropStale(ctx, o.DatabaseURL, schemaPrefix, time.Hour); err != nil {
		return res, err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := testschema.Name(schemaPrefix, hex.EncodeToString(b[:]))
	admin, err := pgx.Connect(ctx, o.DatabaseURL)
	if err != nil {
		return res, fmt.Errorf("connecting: %w", err)
	}
	defer admin.Close(context.Background())
	if err := admin.QueryRow(ctx, "SHOW server_version").Scan(&res.Server); err != nil {
		return res, err
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return res, fmt.Errorf("creating schema: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			fmt.Fprintf(log, "dropping schema %s: %v\n", schema, err)
		}
	}()

	cfg, err := pgxpool.ParseConfig(o.DatabaseURL)
	if err != nil {
		return res, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = "skiplock-bench migrations"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer pool.Close()

	versions := migrations.Versions()
	from := slices.Index(versions, o.From)
	to := slices.Index(versions, o.To)
	if err := migrations.Steps(ctx, pool, from+1); err != nil {
		return res, fmt.Errorf("migrating to %d: %w", o.From, err)
	}

	began := time.Now()
	fmt.Fprintf(log, "filling skiplock_tasks at version %d: %d completed, %d pending tasks\n", o.From, o.Finished, o.Pending)
	if err := fill(ctx, pool, o.Finished, o.Pending); err != nil {
		return res, fmt.Errorf("filling the table: %w", err)
	}
	res.Fill = time.Since(began)
	fmt.Fprintf(log, "filled and vacuumed in %s\n", res.Fill.Round(time.Millisecond))

	loopCtx, stopLoops := context.WithCancel(ctx)
	enq, claim := &recorder{}, &recorder{}
	var wg sync.WaitGroup
	loopErr := make(chan error, 2)
	for _, l := range []struct {
		rec  *recorder
		call func(context.Context, *pgx.Conn) error
	}{{enq, enqueue}, {claim, claimOne}} {
		conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
		if err != nil {
			stopLoops()
			return res, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close(context.Background())
			if err := l.rec.loop(loopCtx, conn, l.call); err != nil && loopCtx.Err() == nil {
				loopErr <- err
			}
		}()
	}
	defer func() {
		stopLoops()
		wg.Wait()
	}()

	for i := from + 1; i <= to; i++ {
		step := Step{From: versions[i-1], To: versions[i]}
		if err := wait(ctx, o.Settle, loopErr); err != nil {
			return res, err
		}
		quietSince := time.Now().Add(-o.Settle)
		enq.forget(quietSince)
		claim.forget(quietSince)
		start := time.Now()
		if err := migrations.Steps(ctx, pool, 1); err != nil {
			return res, fmt.Errorf("migration %d: %w", step.To, err)
		}
		end := time.Now()
		step.Wall = end.Sub(start)
		if err := wait(ctx, o.Settle, loopErr); err != nil {
			return res, err
		}
		step.EnqueueStall, step.Enqueues = enq.overlapping(start, end)
		step.ClaimStall, step.Claims = claim.overlapping(start, end)
		q1, _ := enq.overlapping(quietSince, start.Add(-time.Millisecond))
		q2, _ := claim.overlapping(quietSince, start.Add(-time.Millisecond))
		step.Quiet = max(q1, q2)
		fmt.Fprintf(log, "%d → %d: %s; longest enqueue %s, claim %s\n", step.From, step.To,
			ms(step.Wall), ms(step.EnqueueStall), ms(step.ClaimStall))
		res.Steps = append(res.Steps, step)
	}
	return res, nil
}

// fill inserts the completed and pending tasks, in chunks, and vacuums.
func fill(ctx context.Context, pool *pgxpool.Pool, finished, pending int) error {
	const chunk = 200_000
	for _, f := range []struct {
		sql string
		n   int
	}{{fillFinishedSQL, finished}, {fillPendingSQL, pending}} {
		for lo := 1; lo <= f.n; lo += chunk {
			if _, err := pool.Exec(ctx, f.sql, lo, min(lo+chunk-1, f.n), f.n); err != nil {
				return err
			}
		}
	}
	_, err := pool.Exec(ctx, "VACUUM (ANALYZE) skiplock_tasks")
	return err
}

func enqueue(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, enqueueSQL)
	return err
}

// claimOne claims the oldest due task and completes it; with none left it
// does nothing.
func claimOne(ctx context.Context, conn *pgx.Conn) error {
	var id int64
	err := conn.QueryRow(ctx, claimSQL).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		// The backlog is gone: poll, as an idle worker does.
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, completeSQL, id)
	return err
}

// wait waits d, returning early with a loop's error.
func wait(ctx context.Context, d time.Duration, loopErr <-chan error) error {
	select {
	case <-time.After(d):
		return nil
	case err := <-loopErr:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recorder keeps the start and end of a loop's calls.
type recorder struct {
	mu       sync.Mutex
	calls    []call
	inFlight time.Time // the start of the call under way, if any
}

type call struct{ start, end time.Time }

// loop calls fn on conn until ctx ends, recording each call.
func (r *recorder) loop(ctx context.Context, conn *pgx.Conn, fn func(context.Context, *pgx.Conn) error) error {
	for ctx.Err() == nil {
		start := time.Now()
		r.mu.Lock()
		r.inFlight = start
		r.mu.Unlock()
		err := fn(ctx, conn)
		end := time.Now()
		r.mu.Lock()
		r.inFlight = time.Time{}
		r.calls = append(r.calls, call{start, end})
		r.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// forget drops the calls that ended before t.
func (r *recorder) forget(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := 0
	for i < len(r.calls) && r.calls[i].end.Before(t) {
		i++
	}
	r.calls = append(r.calls[:0], r.calls[i:]...)
}

// overlapping returns the longest call that overlapped [from, to], a call
// still under way counting as lasting until now, and how many did.
func (r *recorder) overlapping(from, to time.Time) (longest time.Duration, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c.end.Before(from) || c.start.After(to) {
			continue
		}
		n++
		longest = max(longest, c.end.Sub(c.start))
	}
	if !r.inFlight.IsZero() && !r.inFlight.After(to) {
		n++
		longest = max(longest, time.Since(r.inFlight))
	}
	return longest, n
}
