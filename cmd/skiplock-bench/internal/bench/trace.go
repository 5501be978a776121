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
// included, so its claims and unlocks are timed too.
type queryStats struct {
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
	s, ok := ctx.Value(traceKey{}).(traceStart)
	if !ok {
		return
	}
	d := time.Since(s.start)
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.stats[s.name]
	if st == nil {
		st = &queryStat{}
		q.stats[s.name] = st
	}
	st.Calls++
	st.Rows += data.CommandTag.RowsAffected()
	st.Total += d
	st.Max = max(st.Max, d)
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
