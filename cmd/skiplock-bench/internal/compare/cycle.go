package compare

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/cpustat"
)

// The cycle is the bare SQL of a SKIP LOCKED + advisory-lock queue with no
// framework around it: the fewest round trips a worker of such a queue
// makes per batch, a reference for what any framework could reach on this
// server. A lock session claims a batch (rows locked FOR UPDATE SKIP LOCKED
// and each taken under a session advisory lock, as skiplock's advisory mode
// does), a second connection marks the batch completed in one statement
// (committed, so durably), and the lock session releases the batch's
// advisory locks in one statement; again, until a claim finds nothing.
const (
	cycleBatch = 1000

	// The table is minimal: the claim's index holds the pending rows only,
	// as a queue's would, so that a claim does not walk the finished ones.
	cycleSchema = `CREATE TABLE compare_cycle (
	id bigserial PRIMARY KEY,
	status text NOT NULL DEFAULT 'pending',
	payload jsonb NOT NULL DEFAULT '{}');
CREATE INDEX compare_cycle_pending ON compare_cycle (id) WHERE status = 'pending'`

	cycleInsert = `INSERT INTO compare_cycle (payload)
	SELECT jsonb_build_object('n', g) FROM generate_series(1, $1::int) AS g`

	// $1 is the advisory locks' class (the table's oid, as int4), $2 the
	// batch size.
	cycleClaim = `WITH c AS MATERIALIZED (
	SELECT id FROM compare_cycle WHERE status = 'pending' ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED),
l AS MATERIALIZED (SELECT id FROM c WHERE pg_try_advisory_lock($1::int, id::int))
UPDATE compare_cycle AS t SET status = 'running' FROM l WHERE t.id = l.id
RETURNING t.id`

	cycleComplete = `UPDATE compare_cycle SET status = 'completed' WHERE id = ANY($1)`

	cycleUnlock = `SELECT count(pg_advisory_unlock($1::int, id::int)) FROM unnest($2::bigint[]) AS id`
)

// runCycle creates the table in the fresh database, inserts n rows in one
// statement, then runs the cycle; the clock runs from before its two
// connections open until a claim comes back empty.
func runCycle(ctx context.Context, n int, dsn string, stdout, stderr io.Writer) error {
	setup, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer setup.Close(context.WithoutCancel(ctx))
	if _, err := setup.Exec(ctx, cycleSchema); err != nil {
		return fmt.Errorf("creating the table: %w", err)
	}
	fmt.Fprintf(stderr, "cycle: inserting %d rows (INSERT ... SELECT generate_series)\n", n)
	start := time.Now()
	if _, err := setup.Exec(ctx, cycleInsert, n); err != nil {
		return fmt.Errorf("inserting: %w", err)
	}
	insert := time.Since(start)
	var class int32
	if err := setup.QueryRow(ctx, "SELECT 'compare_cycle'::regclass::oid::int").Scan(&class); err != nil {
		return err
	}

	fmt.Fprintf(stderr, "cycle: working (batches of %d)\n", cycleBatch)
	workStart := time.Now()
	lock, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer lock.Close(context.WithoutCancel(ctx))
	done, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer done.Close(context.WithoutCancel(ctx))
	var lockPID, donePID int
	if err := lock.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&lockPID); err != nil {
		return err
	}
	if err := done.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&donePID); err != nil {
		return err
	}
	// The server's CPU is its two backends', when the server is on this
	// machine (their /proc entries are readable).
	var cpu *cpustat.Work
	if cpustat.Local(lockPID) && cpustat.Local(donePID) {
		cpu = cpustat.Start(lockPID, donePID)
	} else {
		cpu = cpustat.Start()
	}
	worked := 0
	for {
		rows, err := lock.Query(ctx, cycleClaim, class, cycleBatch)
		if err != nil {
			return fmt.Errorf("claiming: %w", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("claiming: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		if _, err := done.Exec(ctx, cycleComplete, ids); err != nil {
			return fmt.Errorf("completing: %w", err)
		}
		var unlocked int
		if err := lock.QueryRow(ctx, cycleUnlock, class, ids).Scan(&unlocked); err != nil {
			return fmt.Errorf("unlocking: %w", err)
		}
		worked += len(ids)
	}
	elapsed := time.Since(workStart)
	var cpuOut strings.Builder
	cpu.Report(&cpuOut, n)

	var left int
	if err := setup.QueryRow(ctx, "SELECT count(*) FROM compare_cycle WHERE status <> 'completed'").Scan(&left); err != nil {
		return err
	}
	if worked != n || left != 0 {
		return fmt.Errorf("worked %d rows and %d are not completed, want %d and 0", worked, left, n)
	}
	fmt.Fprintf(stdout, "system=cycle n=%d batch=%d connections=2 insert_per_s=%.0f\n", n, cycleBatch, float64(n)/insert.Seconds())
	io.WriteString(stdout, cpuOut.String())
	fmt.Fprintf(stdout, "work_per_s=%.0f\n", float64(n)/elapsed.Seconds())
	return nil
}
