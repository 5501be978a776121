package worker

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
)

// customPlans sends statements unnamed (pgx.QueryExecModeExec), so that
// PostgreSQL plans each call with its real parameters. The outcome write
// and the claims with limits must never run on a generic plan left to the
// planner's estimates: one made while the table was small compares every
// running row with every row of the batch (a 1,000-row write: 2,640 ms
// generic against 9 ms custom, measured in docs/PERFORMANCE.md), and a
// claim's is a bitmap scan and sort of every pending row (65-430 ms at
// 100,000 rows against 3 ms). Planning costs 0.5-1.5 ms a call, spread
// over hundreds of tasks. The plain claim on the lock session, and the
// claims under queue limits, run on one generic plan whose shape is fixed
// instead (onePlan).
//
// An unnamed statement also takes one round trip where a cached one takes
// two the first time it runs on a connection (its Parse and Describe, then
// its execution): the statements that run once or seldom on a connection,
// Run's checks at start above all, use it for that. Across a 2.2 ms round
// trip, caching them had cost a worker about 35 ms before its first claim.
type customPlans struct{ db.DBTX }

func (c customPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.DBTX.Exec(ctx, sql, execArgs(args)...)
}

func (c customPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return c.DBTX.Query(ctx, sql, execArgs(args)...)
}

func (c customPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return c.DBTX.QueryRow(ctx, sql, execArgs(args)...)
}

// execArgs are args for pgx.QueryExecModeExec, their integer arrays
// written out as text (textArrays).
func execArgs(args []any) []any {
	return textArrays(append(make([]any, 0, len(args)+1), pgx.QueryExecModeExec), args)
}

// textArrays appends args to out, each []int64 and []int32 written out as
// the text of a PostgreSQL array. pgx writes an integer array element by
// element, each element boxed into an interface (and, in the text format,
// its text made a string): an allocation or two per element, and the
// claim's unlocks and the outcome write send arrays of a batch's tasks,
// three of them of bigint. As text, an array is one string. In
// pgx.QueryExecModeExec, which sends every parameter as text of no stated
// type, these are the very bytes pgx sends; to a prepared statement pgx
// sends a string in the text format, for PostgreSQL to read as the type
// the statement gives the parameter, where it sent the array in binary.
// The values are the same either way.
func textArrays(out, args []any) []any {
	for _, a := range args {
		switch v := a.(type) {
		case []int64:
			if v != nil {
				a = arrayText(v)
			}
		case []int32:
			if v != nil {
				a = arrayText(v)
			}
		}
		out = append(out, a)
	}
	return out
}

// arrayText is v as a PostgreSQL array literal, as pgx writes a slice of
// integers in the text format: {1,2,3}, and {} for none.
func arrayText[T int32 | int64](v []T) string {
	var b strings.Builder
	b.Grow(2 + 21*len(v)) // the most an element takes, its comma with it: never grown again
	b.WriteByte('{')
	var digits [20]byte
	for i, n := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(strconv.AppendInt(digits[:0], int64(n), 10))
	}
	b.WriteByte('}')
	return b.String()
}

// onePlan runs the plain claim, and the claims under queue limits (the
// queue claim, the claim within a held block), on the lock session on the
// session's one generic plan: queries.ClaimPlanSettings, then the claim,
// sent together in one round trip and one implicit transaction (a pgx
// batch, a single Sync), so that the settings hold for the claim alone.
// The claim is prepared under its own text once per session; the settings
// statement goes as the connection's mode sends it. Planned per call, the
// claim spent 0.7-1.5 ms of a 3-4 ms claim of 250 rows in the planner, on
// the one session whose claims follow each other. Under a queue limit that
// binds, where a claim takes a task or two as places free, the queue
// claim planned per call took 1.6-1.8 ms at the 10th percentile, against
// 0.4 ms on the one plan (2 shared CPUs, limit of 3, 10 ms tasks), and its
// planning was most of a place's hand-off from one task to the next.
type onePlan struct {
	conn  *pgx.Conn
	batch pgx.Batch
	execs int
	// unprepared sends the query in the connection's own mode instead of
	// preparing it under its text first: the outcome write's plan, on a
	// pool that may sit behind a transaction pooler (outcomePlan).
	unprepared bool
	// early sends the batch with a Flush before its commit, and returns
	// the query's rows before the commit's result (earlyclaim.go);
	// pending is the pipeline until finish reads its end.
	early   bool
	pending *earlyPlan
	// prepared are the statements an early plan runs, prepared on conn
	// (earlyStatements); set on the lock session's plans. A claim sent
	// without early adds its statement to them, so that an early plan
	// runs the same prepared statement, on the same plan.
	prepared *earlyStatements
}

// newOnePlan is a onePlan on conn with the claim's settings queued: the
// claim query sent through it goes with them.
func newOnePlan(ctx context.Context, queries *db.Queries, conn *pgx.Conn) (*onePlan, error) {
	p := &onePlan{conn: conn}
	if err := queries.ClaimPlanSettings(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// outcomePlan runs an outcome write (TaskCompleteMany, TaskFinishMany) on
// a connection of the pool after queries.OutcomePlanSettings, in one round
// trip and one implicit transaction, as onePlan runs the claim. The write
// goes in the pool's own mode: with pgx's statement cache (its default),
// it is a prepared statement whose one generic plan serves every write on
// that connection; a pool that sends unnamed statements or the simple
// protocol (as one behind a transaction pooler must) plans each write, in
// the same safe shape.
func outcomePlan[T any](ctx context.Context, queries *db.Queries, pool *pgxpool.Pool, write func(db.DBTX) (T, error)) (T, error) {
	var zero T
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return zero, err
	}
	defer conn.Release()
	p := &onePlan{conn: conn.Conn(), unprepared: true}
	if err := queries.OutcomePlanSettings(ctx, p); err != nil {
		return zero, err
	}
	return write(p)
}

// Exec queues sql to run before the query that sends the batch.
func (p *onePlan) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	p.batch.Queue(sql, textArrays(make([]any, 0, len(args)), args)...)
	p.execs++
	return pgconn.CommandTag{}, nil
}

// Query sends the queued statements and sql, and returns sql's rows. The
// batch ends when the rows are closed or their Err read; p is spent.
func (p *onePlan) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if p.early {
		return p.queryEarly(ctx, sql, args)
	}
	// Prepared under its own text, which is how a batch finds it.
	if !p.unprepared {
		sd, err := p.conn.Prepare(ctx, sql, sql)
		if err != nil {
			return nil, err
		}
		if p.prepared != nil {
			p.prepared.share(sd)
		}
	}
	p.batch.Queue(sql, textArrays(make([]any, 0, len(args)), args)...)
	br := p.conn.SendBatch(ctx, &p.batch)
	for i := range p.execs {
		// A statement queued with a reader of its rows (an outcome write
		// a claim carries, handoff.go) is read by it.
		var err error
		if fn := p.batch.QueuedQueries[i].Fn; fn != nil {
			err = fn(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			br.Close()
			return nil, err
		}
	}
	p.execs = 0
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow is Query's first row.
func (p *onePlan) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := p.Query(ctx, sql, args...)
	return firstRow{rows, err}
}

// batchRows are the rows of a batch's last statement; closing them, or
// reading their Err, reads the batch to its end, where its commit's error
// would be.
type batchRows struct {
	pgx.Rows
	br   pgx.BatchResults
	err  error
	done bool
}

func (r *batchRows) end() {
	if !r.done {
		r.done = true
		r.Rows.Close()
		r.err = r.br.Close()
	}
}

func (r *batchRows) Close() { r.end() }

func (r *batchRows) Err() error {
	r.end()
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

type firstRow struct {
	rows pgx.Rows
	err  error
}

func (r firstRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	return r.rows.Err()
}
