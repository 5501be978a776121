package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// queryStats is a pgx tracer that times every statement as the worker sees
// it: round trip, execution and, for an autocommit statement, the commit's
// WAL flush. The lock session copies the pool's connection config, tracer
// included, so its claims and unlocks are timed too. A batch (the lock
// session's claim goes as one, after the statement of its plan's settings)
// counts as one call of its last statement.
type queryStats struct {
	batchTracing
	mu    sync.Mutex
	stats map[string]*queryStat
}

type queryStat struct {
	Calls int64
	Rows  int64
	Total time.Duration
	Max   time.Duration
}

type traceKey struct{}

type traceStart struct {
	name  string
	start time.Time
}

func newQueryStats() *queryStats { return &queryStats{stats: map[string]*queryStat{}} }

func (q *queryStats) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, traceStart{name: queryName(data.SQL), start: time.Now()})
}

func (q *queryStats) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if s, ok := ctx.Value(traceKey{}).(traceStart); ok {
		q.record(s.name, data.CommandTag.RowsAffected(), time.Since(s.start))
	}
}

func (q *queryStats) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if b, ok := ctx.Value(batchKey{}).(*batchTrace); ok && b.name != "" {
		q.record(b.name, b.rows, time.Since(b.start))
	}
}

func (q *queryStats) record(name string, rows int64, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.stats[name]
	if st == nil {
		st = &queryStat{}
		q.stats[name] = st
	}
	st.Calls++
	st.Rows += rows
	st.Total += d
	st.Max = max(st.Max, d)
}

// batchTrace is a batch's start, and its last statement's name and rows.
type batchTrace struct {
	start time.Time
	name  string
	rows  int64
}

type batchKey struct{}

// batchTracing is the start and statements of pgx's BatchTracer, shared by
// the tracers here: it keeps a batchTrace in the batch's context, for
// their TraceBatchEnd.
type batchTracing struct{}

func (batchTracing) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, batchKey{}, &batchTrace{start: time.Now()})
}

func (batchTracing) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if b, ok := ctx.Value(batchKey{}).(*batchTrace); ok {
		b.name, b.rows = queryName(data.SQL), data.CommandTag.RowsAffected()
	}
}

// queryName is the sqlc name of a query ("-- name: TaskClaim :many"), or
// the start of its text.
func queryName(sql string) string {
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		name, _, _ := strings.Cut(rest, " ")
		return name
	}
	f := strings.Fields(sql)
	if len(f) > 3 {
		f = f[:3]
	}
	return strings.Join(f, "_")
}

// write prints one "stat" line per statement for the parent.
func (q *queryStats) write(w io.Writer) {
	q.mu.Lock()
	defer q.mu.Unlock()
	names := make([]string, 0, len(q.stats))
	for n := range q.stats {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := q.stats[n]
		fmt.Fprintf(w, "stat %s %d %d %d %d\n", n, s.Calls, s.Rows, s.Total, s.Max)
	}
}
