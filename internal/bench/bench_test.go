package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/queue"
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
	err := Run(context.Background(), Options{
		DatabaseURL:     pgtest.Server(t).URL,
		Workloads:       Workloads,
		Tasks:           []int{1000},
		Procs:           []int{1, 2},
		Concurrency:     []int{10, 0},
		EnqueueDuration: 300 * time.Millisecond,
		Rates:           []float64{200},
		LatencyDuration: 300 * time.Millisecond,
		SustainedRate:   200,
		Duration:        4500 * time.Millisecond,
		Purge:           time.Second,
		Trace:           true,
		JSON:            true,
		SVGDir:          svgDir,
		Self:            []string{os.Args[0]},
		Progress:        &progress,
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
	for _, r := range report.Results {
		if r.Workload == WorkloadThroughput && r.Metric == "throughput" && !(r.Median > 0) {
			t.Errorf("throughput %v", r.Median)
		}
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
	assertNoSchemasLeft(t, report.Started)
}

func TestRunTable(t *testing.T) {
	start := time.Now()
	var out bytes.Buffer
	err := Run(context.Background(), Options{
		DatabaseURL: pgtest.Server(t).URL,
		Workloads:   []string{WorkloadEnqueueCopy},
		Tasks:       []int{500},
		Runs:        3,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	assertNoSchemasLeft(t, start)
	for _, want := range []string{"median of 3 runs", "WORKLOAD", "EnqueueMany", "COPY prototype, returning ids", ">= 100,000"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// assertNoSchemasLeft checks that the bench dropped every schema it made
// since start. The tests that call Run do not run in parallel, so that
// these are theirs alone.
func assertNoSchemasLeft(t *testing.T, start time.Time) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.Server(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(context.Background(), "SELECT nspname FROM pg_namespace WHERE nspname LIKE $1", schemaPrefix+"%")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		stamp, _, _ := strings.Cut(strings.TrimPrefix(name, schemaPrefix), "_")
		if created, err := strconv.ParseInt(stamp, 10, 64); err == nil && created >= start.Unix() {
			t.Errorf("schema %s left behind", name)
		}
	}
}

func TestCopyEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	// One ordinary insert first, so the COPY's ids do not start at 1.
	if _, err := queue.New(pool).Enqueue(ctx, "first", nil); err != nil {
		t.Fatal(err)
	}
	tasks := []copyTask{
		{Name: "a", Payload: map[string]int{"n": 1}},
		{Name: "b", Queue: "mail", Priority: -2, MaxAttempts: 3, Payload: json.RawMessage(`[1,2]`)},
		{Name: "c"},
	}
	ids, err := copyEnqueue(ctx, pool, tasks, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 || !slices.IsSorted(ids) || ids[0] <= 1 {
		t.Fatalf("ids %v", ids)
	}
	client := queue.New(pool)
	for i, id := range ids {
		task, err := client.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.Name != tasks[i].Name || task.Status != queue.StatusPending {
			t.Errorf("task %d: %+v", id, task)
		}
	}
	b, err := client.Get(ctx, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if b.Queue != "mail" || b.Priority != -2 || b.MaxAttempts != 3 || string(b.Payload) != "[1, 2]" || string(b.Metadata) != "{}" {
		t.Errorf("task b: queue %q priority %d attempts %d payload %s metadata %s", b.Queue, b.Priority, b.MaxAttempts, b.Payload, b.Metadata)
	}
	c, _ := client.Get(ctx, ids[2])
	if c.Queue != queue.DefaultQueue || c.MaxAttempts != queue.DefaultMaxAttempts || string(c.Payload) != "null" {
		t.Errorf("task c: queue %q attempts %d payload %s", c.Queue, c.MaxAttempts, c.Payload)
	}

	// An invalid task fails the whole COPY.
	_, err = copyEnqueue(ctx, pool, []copyTask{{Name: "ok"}, {Name: ""}}, false)
	if !errors.Is(err, queue.ErrInvalidTask) {
		t.Fatalf("got %v, want ErrInvalidTask", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("%d rows, want 4", n)
	}
}

func TestCommandBadInput(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--workload", "nope"},
		{"--tasks", "ten"},
		{"--runs", "-1"},
		{"extra"},
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
}
