package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
)

// TestMain doubles as the worker process: the bench starts this test binary
// again with WorkerProcessFlag, as it starts itself in production.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[len(os.Args)-1] == WorkerProcessFlag {
		os.Exit(Command(context.Background(), nil, []string{WorkerProcessFlag}, os.Stdout, os.Stderr))
	}
	pgtest.Main(m)
}

func TestRunEveryWorkload(t *testing.T) {
	svgDir := t.TempDir()
	var out, progress bytes.Buffer
	schemas := &schemaLog{}
	err := Run(context.Background(), Options{
		DatabaseURL:     pgtest.Server(t).URL,
		Workloads:       Workloads,
		Tasks:           []int{1000},
		Procs:           []int{1, 2},
		Concurrency:     []int{10, 0},
		Limits:          []int{0, 1000},
		WorkflowSize:    50, // 20 workflows, two transactions of them
		EnqueueDuration: 300 * time.Millisecond,
		Rates:           []float64{200},
		LatencyDuration: 300 * time.Millisecond,
		SustainedRate:   200,
		Duration:        4500 * time.Millisecond,
		Purge:           time.Second,
		Pin:             2 * time.Second,
		RateKeyBacklog:  10,
		GatedWork:       []time.Duration{10 * time.Millisecond, 20 * time.Millisecond},
		Trace:           true,
		JSON:            true,
		SVGDir:          svgDir,
		Self:            []string{os.Args[0]},
		Progress:        &progress,
		schemaMade:      schemas.made,
	}, &out)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	var report Report
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out.String())
	}
	for _, w := range Workloads {
		if !slices.ContainsFunc(report.Results, func(r Result) bool { return r.Workload == w }) {
			t.Errorf("no results for workload %s", w)
		}
	}
	limited, released, firsts := false, 0, 0
	switches := map[string]int{}
	var gated []string
	for _, r := range report.Results {
		if r.Workload == WorkloadGated && r.Metric == "of ideal" {
			gated = append(gated, r.Case)
			if !(r.Median > 0) {
				t.Errorf("%s: %v of ideal", r.Case, r.Median)
			}
		}
		if (r.Workload == WorkloadThroughput || r.Workload == WorkloadWorkflow) && r.Metric == "throughput" && !(r.Median > 0) {
			t.Errorf("%s %s: throughput %v", r.Workload, r.Case, r.Median)
		}
		if r.Workload == WorkloadThroughput && r.Metric == "throughput" && strings.HasSuffix(r.Case, " limit=1000") {
			limited = true
		}
		if r.Workload == WorkloadThroughput && strings.HasPrefix(r.Metric, "context switches: ") {
			// Each part waits on sockets at least once in 1,000 tasks.
			switches[r.Metric]++
			if !(r.Median > 0) {
				t.Errorf("%s: %s %v per task", r.Case, r.Metric, r.Median)
			}
		}
		if r.Workload == WorkloadThroughput && r.Metric == "first task after Run" {
			firsts++
			if !(r.Median > 0) {
				t.Errorf("%s: first task after Run %v ms, want the time its first handler ran", r.Case, r.Median)
			}
		}
		if r.Workload == WorkloadWorkflow {
			switch r.Metric {
			case "released by dependencies":
				released++
				if r.Median != 20*49 {
					t.Errorf("%s: %v tasks released by dependencies, want %d", r.Case, r.Median, 20*49)
				}
			case "workflow enqueue":
				if !(r.Median > 0) {
					t.Errorf("%s: workflow enqueue %v", r.Case, r.Median)
				}
			}
		}
	}
	if !limited {
		t.Error("no throughput case with limit=1000")
	}
	wantGated := []string{
		"limit slots=3 workers=3 tasks=300 work=10ms", "exclusive slots=3 workers=3 tasks=300 work=10ms",
		"limit slots=3 workers=3 tasks=300 work=20ms", "exclusive slots=3 workers=3 tasks=300 work=20ms",
	}
	if !slices.Equal(gated, wantGated) {
		t.Errorf("gated cases %q, want %q", gated, wantGated)
	}
	if firsts == 0 {
		t.Error("no throughput case reports the first task after Run")
	}
	for _, part := range []string{"worker", "backends", "machine"} {
		if switches["context switches: "+part] != firsts {
			t.Errorf("%d throughput cases report context switches: %s, want all %d", switches["context switches: "+part], part, firsts)
		}
	}
	if released != 2 { // concurrency 10 and 0
		t.Errorf("%d workflow cases report tasks released by dependencies, want 2", released)
	}
	if len(report.Sustained) < 4 {
		t.Errorf("%d sustained samples, want at least 4", len(report.Sustained))
	}
	for _, name := range []string{"bench-throughput.svg", "bench-latency.svg", "bench-sustained-rate.svg", "bench-sustained-size.svg"} {
		b, err := os.ReadFile(filepath.Join(svgDir, name))
		if err != nil {
			t.Error(err)
			continue
		}
		assertXML(t, b)
	}
	schemas.assertDropped(t)
}

func TestRunTable(t *testing.T) {
	var out bytes.Buffer
	schemas := &schemaLog{}
	err := Run(context.Background(), Options{
		DatabaseURL: pgtest.Server(t).URL,
		Workloads:   []string{WorkloadEnqueueCopy},
		Tasks:       []int{500},
		Runs:        3,
		schemaMade:  schemas.made,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	schemas.assertDropped(t)
	for _, want := range []string{"median of 3 runs", "WORKLOAD", "EnqueueMany", ">= 150,000"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestShards runs the throughput workload over shards at a tiny size: the
// plain baseline and 1 and 2 shards each complete their backlog (the run
// checks every database's count) and report a throughput, and every
// database the run made is dropped.
func TestShards(t *testing.T) {
	var out, progress bytes.Buffer
	var mu sync.Mutex
	var made []string
	err := Run(context.Background(), Options{
		DatabaseURL: pgtest.Server(t).URL,
		Workloads:   []string{WorkloadThroughput},
		Tasks:       []int{301},
		Shards:      []int{0, 1, 2},
		JSON:        true,
		Self:        []string{os.Args[0]},
		Progress:    &progress,
		databaseMade: func(name string) {
			mu.Lock()
			defer mu.Unlock()
			made = append(made, name)
		},
	}, &out)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	var report Report
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out.String())
	}
	var cases []string
	for _, r := range report.Results {
		if r.Metric != "throughput" {
			continue
		}
		cases = append(cases, r.Case)
		if !(r.Median > 0) {
			t.Errorf("%s: throughput %v", r.Case, r.Median)
		}
	}
	if want := []string{"tasks=301 plain", "tasks=301 shards=1", "tasks=301 shards=2"}; !slices.Equal(cases, want) {
		t.Errorf("cases %v, want %v", cases, want)
	}
	if len(made) != 4 { // plain 1, shards=1 1, shards=2 2
		t.Errorf("%d databases made, want 4: %v", len(made), made)
	}
	pool, err := pgxpool.New(context.Background(), pgtest.Server(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var left []string
	rows, err := pool.Query(context.Background(), "SELECT datname FROM pg_database WHERE datname = ANY($1)", made)
	if err == nil {
		left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range left {
		t.Errorf("database %s left behind", name)
	}
}

// schemaLog records the schemas a run makes, so that a test can check
// each was dropped however many other benches share the server.
type schemaLog struct {
	mu    sync.Mutex
	names []string
}

func (l *schemaLog) made(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, name)
}

func (l *schemaLog) assertDropped(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	names := slices.Clone(l.names)
	l.mu.Unlock()
	if len(names) == 0 {
		t.Fatal("the run made no schema")
	}
	pool, err := pgxpool.New(context.Background(), pgtest.Server(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(context.Background(), "SELECT nspname FROM pg_namespace WHERE nspname = ANY($1)", names)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range left {
		t.Errorf("schema %s left behind", name)
	}
}

// TestAlternate checks that the runs of several cases alternate and that
// each case's medians are its own.
func TestAlternate(t *testing.T) {
	t.Parallel()
	b := &bencher{opts: Options{Runs: 3}, env: &env{}, prog: newProgress(nil), report: &Report{}}
	var order []string
	mk := func(name string, value float64) benchCase {
		return benchCase{workload: "w", name: name, run: func(_ context.Context, run int) ([]measure, error) {
			order = append(order, name+strconv.Itoa(run))
			return []measure{{metric: "m", unit: "u", value: value + float64(run)}}, nil
		}}
	}
	if err := b.alternate(context.Background(), []benchCase{mk("a", 10), mk("b", 20)}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a0", "b0", "a1", "b1", "a2", "b2"}; !slices.Equal(order, want) {
		t.Errorf("runs in order %v, want %v", order, want)
	}
	var got []string
	for _, r := range b.report.Results {
		if r.Metric == "m" {
			got = append(got, r.Case+"="+strconv.FormatFloat(r.Median, 'f', -1, 64)+"/"+strconv.Itoa(len(r.Runs)))
		}
	}
	if want := []string{"a=11/3", "b=21/3"}; !slices.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
}

func TestCommandBadInput(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--workload", "nope"},
		{"--tasks", "ten"},
		{"--runs", "-1"},
		{"--limit", "-1"},
		{"--workload", "workflow", "--tasks", "1050"},
		{"--workload", "workflow", "--workflow-size", "2"},
		{"extra"},
		{"--workload", "throughput", "--shards", "-1"},
		{"--workload", "throughput", "--shards", "one"},
		{"--workload", "latency", "--shards", "1"},
		{"--workload", "throughput", "--shard-servers", "postgres://x"},
		{"--workload", "throughput", "--shards", "1", "--limit", "10"},
		{"--workload", "gated", "--gated-work", "ten"},
		{"--workload", "gated", "--gated-work", "36"},
		{"--workload", "gated", "--gated-work", "10ms,0s"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Command(context.Background(), nil, args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), "skiplock-bench") || stdout.Len() != 0 {
			t.Errorf("%v: stderr %q stdout %q", args, stderr.String(), stdout.String())
		}
	}
	var stderr bytes.Buffer
	if code := Command(context.Background(), nil, []string{"--help"}, io.Discard, &stderr); code != 0 {
		t.Errorf("--help: exit %d", code)
	}
	if !strings.Contains(stderr.String(), "--workload") || !strings.Contains(stderr.String(), "Examples:") {
		t.Errorf("--help output:\n%s", stderr.String())
	}
}

func TestChart(t *testing.T) {
	t.Parallel()
	for _, c := range []chart{
		{Title: "log x <&>", XLabel: "x", YLabel: "y", LogX: true, Series: []series{
			{Name: "one", Points: []point{{10, 100}, {100, 2000}, {1000, 35000}}},
			{Name: "two", Points: []point{{10, 150}, {100, 3000}, {1000, math.NaN()}}, Dashed: true},
		}},
		{Title: "log y", LogY: true, XTicks: []tick{{0, "p50"}, {1, "p99"}}, Series: []series{{Name: "a", Points: []point{{0, 0.3}, {1, 12}}}}},
		{Title: "empty"},
		{Title: "flat", Series: []series{{Name: "a", Points: []point{{1, 5}, {2, 5}}}}},
	} {
		var buf bytes.Buffer
		if err := c.WriteSVG(&buf); err != nil {
			t.Fatal(err)
		}
		assertXML(t, buf.Bytes())
		if strings.Contains(buf.String(), "NaN") || strings.Contains(buf.String(), "Inf") {
			t.Errorf("%s: SVG holds NaN or Inf", c.Title)
		}
	}
}

func assertXML(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, b)
		}
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median = %v", got)
	}
	if got := median([]float64{4, 1, 2, 3}); got != 2.5 {
		t.Errorf("median = %v", got)
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is not NaN")
	}
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for p, want := range map[float64]time.Duration{50: 50, 99: 99, 100: 100, 0: 1, 99.9: 100} {
		if got := percentile(d, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	for v, want := range map[float64]string{36000: "36,000", 1234567.8: "1,234,568", 12.25: "12.2", 0.5: "0.5", 3: "3", -2500: "-2,500", 999.6: "1000", 999.4: "999"} {
		if got := formatNumber(v); got != want {
			t.Errorf("formatNumber(%v) = %q, want %q", v, got, want)
		}
	}
	got, err := intList("1, 2,100k,1M")
	if err != nil || !slices.Equal(got, []int{1, 2, 100_000, 1_000_000}) {
		t.Errorf("intList = %v, %v", got, err)
	}
	if d, err := durationList("10ms, 1.5s"); err != nil || !slices.Equal(d, []time.Duration{10 * time.Millisecond, 1500 * time.Millisecond}) {
		t.Errorf("durationList = %v, %v", d, err)
	}
}

// TestPeerLine runs the comparison tool's line at a tiny size, by both
// enqueue paths, and with a worker that deletes what it completes, on a
// schema of its own each.
func TestPeerLine(t *testing.T) {
	for _, c := range []struct {
		path     string
		deleting bool
	}{{PeerEnqueueMany, false}, {PeerEnqueueSingle, false}, {PeerEnqueueMany, true}} {
		path := c.path
		t.Run(fmt.Sprintf("%s/delete=%t", path, c.deleting), func(t *testing.T) {
			var out, progress bytes.Buffer
			err := PeerLine(context.Background(), PeerOptions{N: 300, DSN: pgtest.SchemaURL(t, pgtest.Schema(t, false)), Enqueue: path, DeleteCompleted: c.deleting}, &out, &progress)
			if err != nil {
				t.Fatalf("PeerLine: %v\nprogress:\n%s", err, progress.String())
			}
			m := regexp.MustCompile(`(?m)^work_per_s=([0-9.]+)$`).FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("no work_per_s line in:\n%s", out.String())
			}
			if v, _ := strconv.ParseFloat(m[1], 64); v <= 0 {
				t.Errorf("work_per_s = %s", m[1])
			}
			if !strings.Contains(out.String(), "heap_tuples_per_task=") {
				t.Errorf("no writes line in:\n%s", out.String())
			}
			// The line checked the count itself (every task completed, and
			// with deletes nothing is left); the writes show which it was.
			d := regexp.MustCompile(`deleted ([0-9.]+)\)`).FindStringSubmatch(out.String())
			if d == nil {
				t.Fatalf("no deleted figure in:\n%s", out.String())
			}
			if v, _ := strconv.ParseFloat(d[1], 64); (v > 0.5) != c.deleting {
				t.Errorf("%s rows deleted per task with DeleteCompleted %t", d[1], c.deleting)
			}
		})
	}
	if err := PeerLine(context.Background(), PeerOptions{N: 1, DSN: "postgres://x", Enqueue: "bulk"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "enqueue must be") {
		t.Errorf("bad enqueue path: %v", err)
	}
}

// TestPeerLineSchemaSQL: the line runs --schema-sql once the database is
// migrated, and works the schema it leaves; SQL that fails stops the line
// before any task is enqueued.
func TestPeerLineSchemaSQL(t *testing.T) {
	srv := pgtest.Server(t)
	schema := pgtest.Schema(t, false)
	ctx := context.Background()
	const lean = `DROP INDEX skiplock_tasks_finished_idx; CREATE INDEX skiplock_tasks_finished_idx ON skiplock_tasks (status, queue, finished_at) WHERE status IN ('failed', 'cancelled')`
	var out, progress bytes.Buffer
	if err := PeerLine(ctx, PeerOptions{N: 200, DSN: pgtest.SchemaURL(t, schema), SchemaSQL: lean}, &out, &progress); err != nil {
		t.Fatalf("PeerLine: %v\nprogress:\n%s", err, progress.String())
	}
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var def string
	if err := conn.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'skiplock_tasks_finished_idx'`, schema).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(def, "completed") {
		t.Errorf("the index --schema-sql made is not the one left: %s", def)
	}

	bad := pgtest.Schema(t, false)
	err = PeerLine(ctx, PeerOptions{N: 200, DSN: pgtest.SchemaURL(t, bad), SchemaSQL: "ALTER TABLE no_such_table ADD COLUMN x int"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--schema-sql") || !strings.Contains(err.Error(), "no_such_table") {
		t.Fatalf("failing --schema-sql: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.skiplock_tasks`, bad)).Scan(&n); err != nil || n != 0 {
		t.Errorf("tasks enqueued after a failing --schema-sql: %d, %v", n, err)
	}
}

// TestHandOffs: a key's hand-off is its next start less its last end; the
// limit's i-th start past the first gatedSlots follows its i-th end; the
// overshoot is a span's length past the work.
func TestHandOffs(t *testing.T) {
	at := func(msec float64) time.Time {
		return time.Unix(0, 0).Add(time.Duration(msec * float64(time.Millisecond)))
	}
	span := func(key int, start, end float64) handSpan { return handSpan{key: key, start: at(start), end: at(end)} }
	const work = 10 * time.Millisecond
	gaps, over := handOffs([]handSpan{
		span(1, 13, 23.5), span(0, 0, 10), span(1, 0, 11), span(0, 12, 22),
	}, work)
	if want := []time.Duration{2 * time.Millisecond, 2 * time.Millisecond}; !slices.Equal(gaps, want) {
		t.Errorf("exclusive hand-offs %v, want %v", gaps, want)
	}
	if want := []time.Duration{0, 0, 500 * time.Microsecond, time.Millisecond}; !slices.Equal(over, want) {
		t.Errorf("overshoots %v, want %v", over, want)
	}
	// Three places: starts 0, 1, 2, then 13 (after the end at 10), 14
	// (after 11) and 16 (after 12).
	gaps, _ = handOffs([]handSpan{
		span(-1, 0, 10), span(-1, 1, 11), span(-1, 2, 12), span(-1, 13, 23), span(-1, 16, 26), span(-1, 14, 24),
	}, work)
	if want := []time.Duration{3 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond}; !slices.Equal(gaps, want) {
		t.Errorf("limit hand-offs %v, want %v", gaps, want)
	}
}

// TestBusy: places busy is the handlers' time over the places' time, and
// the hand-off mean is the mean gap.
func TestBusy(t *testing.T) {
	at := func(msec float64) time.Time {
		return time.Unix(0, 0).Add(time.Duration(msec * float64(time.Millisecond)))
	}
	spans := []handSpan{{key: -1, start: at(0), end: at(10)}, {key: -1, start: at(0), end: at(20)}, {key: -1, start: at(5), end: at(20)}}
	// 45 ms of handlers on 3 places over 20 ms.
	if got := busy(spans, 20*time.Millisecond); got != 0.75 {
		t.Errorf("busy %v, want 0.75", got)
	}
	if got := busy(spans, 0); got != 0 {
		t.Errorf("busy over no time %v, want 0", got)
	}
	if got := mean([]time.Duration{time.Millisecond, 2 * time.Millisecond, 6 * time.Millisecond}); got != 3*time.Millisecond {
		t.Errorf("mean %v, want 3ms", got)
	}
	if got := mean(nil); got != 0 {
		t.Errorf("mean of none %v, want 0", got)
	}
}

// TestWorkFor: a gated handler's work never ends before its deadline,
// whether the deadline is past the timer's part or within the thread's
// sleep alone, and ends with ctx's error once ctx is done.
func TestWorkFor(t *testing.T) {
	for _, d := range []time.Duration{0, 700 * time.Microsecond, timerSlack, 12 * time.Millisecond} {
		deadline := time.Now().Add(d)
		if err := workFor(context.Background(), deadline); err != nil {
			t.Fatalf("workFor(%v): %v", d, err)
		}
		if now := time.Now(); now.Before(deadline) {
			t.Errorf("workFor(%v) returned %v before its deadline", d, deadline.Sub(now))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(5*time.Millisecond, cancel)
	start := time.Now()
	if err := workFor(ctx, start.Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Errorf("workFor with ctx cancelled: %v, want context.Canceled", err)
	}
	cancelled, stop := context.WithCancel(context.Background())
	stop()
	if err := workFor(cancelled, time.Now().Add(time.Millisecond)); !errors.Is(err, context.Canceled) {
		t.Errorf("workFor with ctx done before the thread's sleep: %v, want context.Canceled", err)
	}
}
