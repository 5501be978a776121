package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A claim that carries outcomes (handoff.go) commits with a wait for its
// WAL flush, as the outcomes' own write would. The claimed rows need not
// wait for it: the task locks the claim took are session locks, held
// whatever becomes of its transaction, and its row locks keep every other
// writer off the rows until the commit. So the claim is sent with a Flush
// after its last statement, before the Sync that commits it: the server
// sends the claimed rows as soon as the statement has run, and their
// handlers start while the commit is flushed (lockSession.claim). On a
// host where fdatasync took 0.3 ms, the commit took 0.5-0.8 ms of a
// carry's 1.5-1.8 ms round trip.
//
// Until the commit returns, other sessions still see the claimed rows as
// they were, and the outcomes the claim carries unwritten. What a handler
// reads or writes through its context (a checkpoint, progress, its
// dependencies' outputs, its batch) waits for the commit first
// (scope.claimCommitted). Should the commit fail, the session is closed:
// its locks go with it, and the tasks started early are cancelled as the
// tasks of any lost session are (Worker.launch, onLost), their claims
// never committed.

// earlyPlan is an onePlan's batch sent as a pipeline, with a Flush before
// its Sync (onePlan.early).
type earlyPlan struct {
	pl *pgconn.Pipeline
	// committed is closed once the pipeline's Sync has been read; err is
	// then the commit's error, if any.
	committed chan struct{}
	err       error
	once      sync.Once
}

// queryEarly is onePlan.Query for an early plan: every queued statement,
// then sql, runs as a statement prepared on the connection
// (earlyStatements), and sql's rows are returned as soon as the server has
// them. The caller ends the plan with finish once the rows are read. (A
// pipeline closed before its Sync is sent closes the connection: the
// session is then lost, as on any failure to send.)
func (p *onePlan) queryEarly(ctx context.Context, sql string, args []any) (pgx.Rows, error) {
	p.batch.Queue(sql, textArrays(make([]any, 0, len(args)), args)...)
	queued := p.batch.QueuedQueries
	sds, err := p.prepared.describe(ctx, p.conn.PgConn(), queued)
	if err != nil {
		return nil, err
	}
	tm := p.conn.TypeMap()
	var eqb pgx.ExtendedQueryBuilder
	pl := p.conn.PgConn().StartPipeline(ctx)
	for i, q := range queued {
		// The pipeline copies each message as it is queued: the builder's
		// buffers may be reused for the next.
		if err := eqb.Build(tm, sds[i], q.Arguments); err != nil {
			pl.Close()
			return nil, fmt.Errorf("skiplock: encoding %q: %w", queryName(q.SQL), err)
		}
		pl.SendQueryStatement(sds[i], eqb.ParamValues, eqb.ParamFormats, eqb.ResultFormats)
	}
	pl.SendFlushRequest()
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		pl.Close()
		return nil, err
	}
	p.pending = &earlyPlan{pl: pl, committed: make(chan struct{})}
	for i := range p.execs {
		rr, err := nextResult(pl)
		if err == nil {
			if fn := queued[i].Fn; fn != nil {
				// An outcome write a claim carries, read by its reader.
				err = fn(earlyResults{pgx.RowsFromResultReader(tm, rr)})
			} else {
				_, err = rr.Close()
			}
		}
		if err != nil {
			p.abort()
			return nil, err
		}
	}
	p.execs = 0
	rr, err := nextResult(pl)
	if err != nil {
		p.abort()
		return nil, err
	}
	return pgx.RowsFromResultReader(tm, rr), nil
}

// finish reads the end of an early plan's pipeline, its commit, and
// returns the commit's error; it is a no-op on any other plan.
func (p *onePlan) finish() error {
	e := p.pending
	if e == nil {
		return nil
	}
	e.end(true)
	return e.err
}

// abort ends an early plan whose statements failed: the pipeline is read
// to its end, whose error the statement's already reported.
func (p *onePlan) abort() {
	if e := p.pending; e != nil {
		e.end(false)
	}
}

// end reads the rest of the pipeline: with sync, the commit's result,
// which becomes err.
func (e *earlyPlan) end(sync bool) {
	e.once.Do(func() {
		defer close(e.committed)
		if sync {
			res, err := e.pl.GetResults()
			if err == nil {
				if _, ok := res.(*pgconn.PipelineSync); !ok {
					err = fmt.Errorf("skiplock: claim pipeline: expected its commit, got %T", res)
				}
			}
			e.err = err
		}
		if err := e.pl.Close(); err != nil && e.err == nil {
			e.err = err
		}
		if e.err == nil && !sync {
			e.err = errors.New("skiplock: claim pipeline aborted")
		}
	})
}

// earlyStatements are the statements early plans run, prepared on one
// connection under names of their own, so that those a plan has not met
// yet are prepared together, in one round trip; and the claims the
// session has prepared for plans that are not early (share), under pgx's
// names. A claim that a carry runs is then the statement the session's
// other claims run, planned once: prepared again under a name of its own,
// it was planned again at the session's first carry (a generic plan of a
// claim took 5-15 ms to make on a 2 vCPU AMD EPYC), and that carry's
// places waited for it, 8-10 ms from the handlers' ends to the next
// starts against about 1 ms after it.
type earlyStatements struct {
	byText map[string]*pgconn.StatementDescription
	n      int // names given: each is used once on the connection
}

// share records a statement prepared on the connection by other means,
// for early plans to run as it is.
func (e *earlyStatements) share(sd *pgconn.StatementDescription) {
	if e.byText[sd.SQL] == nil {
		e.byText[sd.SQL] = sd
	}
}

// describe returns the prepared statement of each query, preparing those
// not yet prepared.
func (e *earlyStatements) describe(ctx context.Context, conn *pgconn.PgConn, queued []*pgx.QueuedQuery) ([]*pgconn.StatementDescription, error) {
	sds := make([]*pgconn.StatementDescription, len(queued))
	var missing []string
	for i, q := range queued {
		if sds[i] = e.byText[q.SQL]; sds[i] == nil && !slices.Contains(missing, q.SQL) {
			missing = append(missing, q.SQL)
		}
	}
	if len(missing) > 0 {
		pl := conn.StartPipeline(ctx)
		names := make([]string, len(missing))
		for i, sql := range missing {
			e.n++
			names[i] = "skiplock_carry_" + strconv.Itoa(e.n)
			pl.SendPrepare(names[i], sql, nil)
		}
		if err := pl.Sync(); err != nil {
			pl.Close()
			return nil, err
		}
		for i, sql := range missing {
			res, err := pl.GetResults()
			if err != nil {
				pl.Close()
				return nil, fmt.Errorf("skiplock: preparing %q: %w", queryName(sql), err)
			}
			sd, ok := res.(*pgconn.StatementDescription)
			if !ok {
				pl.Close()
				return nil, fmt.Errorf("skiplock: preparing %q: got %T", queryName(sql), res)
			}
			// A pipeline's description names neither: the pipeline's
			// queries find the statement by its name.
			sd.Name, sd.SQL = names[i], sql
			e.byText[sql] = sd
		}
		if err := pl.Close(); err != nil {
			return nil, err
		}
		for i, q := range queued {
			sds[i] = e.byText[q.SQL]
		}
	}
	return sds, nil
}

// nextResult is the next statement's result of an early plan's pipeline.
func nextResult(pl *pgconn.Pipeline) (*pgconn.ResultReader, error) {
	res, err := pl.GetResults()
	if err != nil {
		return nil, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return nil, fmt.Errorf("skiplock: claim pipeline: expected a statement's result, got %T", res)
	}
	return rr, nil
}

// earlyResults hands one statement's rows of an early plan to the reader
// a batch would have called (queued).
type earlyResults struct{ rows pgx.Rows }

func (r earlyResults) Query() (pgx.Rows, error) { return r.rows, nil }

func (r earlyResults) Exec() (pgconn.CommandTag, error) {
	r.rows.Close()
	return r.rows.CommandTag(), r.rows.Err()
}

func (r earlyResults) QueryRow() pgx.Row { return firstRow{rows: r.rows} }

func (r earlyResults) Close() error {
	r.rows.Close()
	return r.rows.Err()
}

// queryName is the first line of a query, to name it in an error.
func queryName(sql string) string {
	for i := range len(sql) {
		if sql[i] == '\n' {
			return sql[:i]
		}
	}
	return sql
}

func (earlyResults) Tx() pgx.Tx { return nil }
