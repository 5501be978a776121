package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/skiplock/skiplock/internal/humanize"
)

func (r *Report) writeTable(w io.Writer) error {
	m := r.Machine
	fmt.Fprintf(w, "skiplock bench: %d CPUs (%s), %.0f GiB, %s, PostgreSQL %s (%s), load %s\n",
		m.CPUs, m.CPUModel, m.MemoryGiB, m.GoVersion, m.PGVersion, m.Server, r.Load)
	var settings []string
	for _, name := range pgSettings {
		if v, ok := m.Settings[name]; ok {
			settings = append(settings, name+"="+v)
		}
	}
	fmt.Fprintf(w, "server: %s\n", strings.Join(settings, " "))
	if len(r.WorkerSettings)+len(r.LockSessionSettings) > 0 {
		fmt.Fprintf(w, "EXPERIMENT: worker connections SET %s; lock session SET %s\n",
			strings.Join(r.WorkerSettings, " "), strings.Join(r.LockSessionSettings, " "))
	}
	if r.Mode == "lease" {
		fmt.Fprintln(w, "worker mode: lease")
	}
	if r.SchemaSQL != "" {
		fmt.Fprintf(w, "EXPERIMENT: schema SQL %q\n", r.SchemaSQL)
	}
	if r.DeleteCompleted {
		fmt.Fprintln(w, "workers: DeleteCompleted (throughput)")
	}
	if m.Build != "" {
		fmt.Fprintf(w, "build: %s\n", m.Build)
	}
	if r.Runs > 1 {
		fmt.Fprintf(w, "median of %d runs\n", r.Runs)
	}
	if r.Discarded > 0 {
		fmt.Fprintf(w, "%d runs discarded and repeated: other processes used over %.0f%% of the CPU during them\n", r.Discarded, 100*disturbed)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tCASE\tMETRIC\tMEDIAN\tUNIT\tRUNS\tTARGET\t")
	for _, res := range r.Results {
		runs := ""
		if len(res.Runs) > 1 {
			parts := make([]string, len(res.Runs))
			for i, v := range res.Runs {
				parts[i] = formatNumber(v)
			}
			runs = strings.Join(parts, " ")
		}
		verdict := ""
		if res.Pass != nil {
			verdict = res.Target + map[bool]string{true: " ok", false: " MISSED"}[*res.Pass]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", res.Workload, res.Case, res.Metric, formatNumber(res.Median), res.Unit, runs, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Sustained) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "sustained run, samples:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "t (s)\tin/s\tout/s\tbacklog\ttask locks\tworker RSS MiB\theap MiB\ttable MiB\tclaim idx MiB\tdead rows\t")
		for _, s := range r.Sustained {
			fmt.Fprintf(tw, "%.0f\t%.0f\t%.0f\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%d\t\n", s.Elapsed, s.InRate, s.OutRate, s.Backlog, s.TaskLocks,
				mib(s.WorkerRSS), mib(s.WorkerHeap), mib(s.TableBytes), mib(s.ClaimIndexBytes), s.DeadRows)
		}
		return tw.Flush()
	}
	return nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// formatNumber prints large numbers with thousands separators and small
// ones with three significant digits.
func formatNumber(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Sprint(v)
	case math.Abs(v) >= 1000:
		return humanize.Count(int64(math.Round(v)))
	case v == math.Trunc(v) || math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// charts draws what the results hold: throughput against concurrency (the
// scaling workload), latency percentiles (latency) and the sustained run
// over time.
func (b *bencher) charts() map[string]chart {
	out := map[string]chart{}
	runs := "one run"
	if b.report.Runs > 1 {
		runs = fmt.Sprintf("median of %d runs", b.report.Runs)
	}
	note := fmt.Sprintf("%d CPUs, PostgreSQL %s, %s", b.report.Machine.CPUs, b.report.Machine.PGVersion, runs)

	// Throughput: one line per process count, against worker concurrency.
	byProcs := map[float64][]point{}
	concs := map[float64]bool{}
	for _, r := range b.report.Results {
		if r.Workload == WorkloadScaling && r.Metric == "throughput" {
			byProcs[r.Params["procs"]] = append(byProcs[r.Params["procs"]], point{r.Params["concurrency"], r.Median})
			concs[r.Params["concurrency"]] = true
		}
	}
	if len(byProcs) > 0 {
		c := chart{Title: "Work throughput, no-op handlers", YLabel: "tasks/s", Notes: []string{
			note + fmt.Sprintf(", backlog of %s tasks", formatNumber(float64(b.opts.Tasks[0]))),
		}}
		procs := sortedKeys(byProcs)
		if len(concs) > 1 {
			c.XLabel, c.LogX = "worker Concurrency (per process)", true
			for _, p := range procs {
				pts := byProcs[p]
				slices.SortFunc(pts, func(a, b point) int { return cmpFloat(a.X, b.X) })
				c.Series = append(c.Series, series{Name: fmt.Sprintf("%g process%s", p, plural(p)), Points: pts})
			}
			for _, x := range sortedKeys(concs) {
				c.XTicks = append(c.XTicks, tick{x, formatNumber(x)})
			}
		} else {
			c.XLabel = "worker processes (default settings)"
			var pts []point
			for _, p := range procs {
				pts = append(pts, point{p, byProcs[p][0].Y})
				c.XTicks = append(c.XTicks, tick{p, formatNumber(p)})
			}
			c.Series = []series{{Name: "throughput", Points: pts}}
		}
		out["bench-throughput.svg"] = c
	}

	// Latency: percentiles, one line per enqueue rate.
	percentiles := []struct {
		metric string
		x      float64
	}{{"p50", 0}, {"p90", 1}, {"p99", 2}, {"p99.9", 3}, {"max", 4}}
	byRate := map[float64][]point{}
	for _, r := range b.report.Results {
		if r.Workload != WorkloadLatency {
			continue
		}
		for _, p := range percentiles {
			if r.Metric == p.metric {
				byRate[r.Params["rate"]] = append(byRate[r.Params["rate"]], point{p.x, r.Median})
			}
		}
	}
	if len(byRate) > 0 {
		c := chart{Title: "Latency, commit of Enqueue to handler start (idle worker)", XLabel: "percentile",
			YLabel: "milliseconds (log scale)", LogY: true, Notes: []string{note + ", one Enqueue at a time, default worker settings"}}
		for _, p := range percentiles {
			c.XTicks = append(c.XTicks, tick{p.x, p.metric})
		}
		for _, rate := range sortedKeys(byRate) {
			pts := byRate[rate]
			slices.SortFunc(pts, func(a, b point) int { return cmpFloat(a.X, b.X) })
			c.Series = append(c.Series, series{Name: fmt.Sprintf("%s tasks/s", formatNumber(rate)), Points: pts})
		}
		out["bench-latency.svg"] = c
	}

	// Sustained: rates and sizes over time.
	if s := b.report.Sustained; len(s) > 1 {
		var in, outR, rss, table []point
		for _, x := range s {
			in = append(in, point{x.Elapsed, x.InRate})
			outR = append(outR, point{x.Elapsed, x.OutRate})
			rss = append(rss, point{x.Elapsed, mib(x.WorkerRSS)})
			table = append(table, point{x.Elapsed, mib(x.TableBytes)})
		}
		sNote := fmt.Sprintf("%d CPUs, PostgreSQL %s, %s tasks/s offered, one worker process, default settings",
			b.report.Machine.CPUs, b.report.Machine.PGVersion, formatNumber(b.opts.SustainedRate))
		out["bench-sustained-rate.svg"] = chart{Title: "Sustained load: tasks in and out", XLabel: "seconds", YLabel: "tasks/s",
			Notes: []string{sNote}, Series: []series{{Name: "enqueued/s", Points: in, Dashed: true}, {Name: "completed/s", Points: outR}}}
		var locks []point
		for _, x := range s {
			locks = append(locks, point{x.Elapsed, float64(x.TaskLocks)})
		}
		out["bench-sustained-locks.svg"] = chart{Title: "Sustained load: task advisory locks held", XLabel: "seconds", YLabel: "locks",
			Notes: []string{sNote}, Series: []series{{Name: "task locks (sampled)", Points: locks}}}
		out["bench-sustained-size.svg"] = chart{Title: "Sustained load: worker memory and table size", XLabel: "seconds", YLabel: "MiB",
			Notes: []string{sNote}, Series: []series{{Name: "worker RSS", Points: rss}, {Name: "skiplock_tasks with indexes", Points: table}}}
	}
	return out
}

func plural(n float64) string {
	if n == 1 {
		return ""
	}
	return "es"
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sortedKeys[V any](m map[float64]V) []float64 {
	keys := make([]float64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
