package dashboard

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
)

// Throughput charts cover chartWindow in chartBuckets buckets, read from
// the table (finished_at, through the finished index) on each refresh: a
// dashboard opened for the first time, or restarted, shows the last hour.
const (
	chartWindow  = time.Hour
	chartBuckets = 60
	chartBucket  = chartWindow / chartBuckets
)

// throughput is what finished per queue in each bucket of the last
// chartWindow, oldest first.
type throughput struct {
	since     time.Time
	completed map[string][]float64
	failed    map[string][]float64
}

func (h *handler) readThroughput(ctx context.Context) (throughput, error) {
	return h.through.get(func() (throughput, error) {
		// Aligned buckets, so that a refresh does not shift every bar.
		since := time.Now().Truncate(chartBucket).Add(chartBucket - chartWindow)
		rows, err := ops.Throughput(ctx, h.client, since, chartBucket)
		if err != nil {
			return throughput{}, err
		}
		tp := throughput{since: since, completed: map[string][]float64{}, failed: map[string][]float64{}}
		for _, r := range rows {
			m := tp.completed
			if r.Status == queue.StatusFailed {
				m = tp.failed
			}
			if m[r.Queue] == nil {
				m[r.Queue] = make([]float64, chartBuckets)
			}
			if r.Bucket >= 0 && r.Bucket < chartBuckets {
				m[r.Queue][r.Bucket] += float64(r.Count)
			}
		}
		return tp, nil
	})
}

// chartSize is a chart's geometry: the whole picture, and the margins the
// axes' labels take.
type chartSize struct {
	w, h                     int
	left, right, top, bottom int
	xLabels                  int // labels along the time axis
	yTicks                   int // gridlines above zero
}

var (
	bigChart   = chartSize{w: 1000, h: 190, left: 44, right: 12, top: 10, bottom: 24, xLabels: 7, yTicks: 4}
	smallChart = chartSize{w: 240, h: 56, left: 30, right: 4, top: 6, bottom: 14, xLabels: 2, yTicks: 1}
)

// niceTop rounds a chart's largest value up to 1, 2 or 5 times a power of
// ten, split into ticks gridlines, so every gridline is a round number.
func niceTop(v float64, ticks int) float64 {
	if v <= 0 {
		return float64(ticks)
	}
	step := v / float64(ticks)
	mag := math.Pow(10, math.Floor(math.Log10(step)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= step {
			step = m * mag
			break
		}
	}
	if step < 1 {
		step = 1
	}
	return step * float64(ticks)
}

// barChart draws completed (below) and failed (stacked above) tasks per
// bucket as an SVG bar chart with a value axis and a time axis labelled in
// the server's zone. Each bar carries its numbers as a tooltip. It holds
// numbers and formatted times only, so it is safe to emit unescaped.
func barChart(completed, failed []float64, since time.Time, sz chartSize, label string) template.HTML {
	n := max(len(completed), len(failed))
	val := func(s []float64, i int) float64 {
		if i < len(s) {
			return s[i]
		}
		return 0
	}
	peak := 0.0
	for i := range n {
		peak = max(peak, val(completed, i)+val(failed, i))
	}
	top := niceTop(peak, sz.yTicks)
	plotW := float64(sz.w - sz.left - sz.right)
	plotH := float64(sz.h - sz.top - sz.bottom)
	y := func(v float64) float64 { return float64(sz.top) + plotH - v/top*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s" data-peak="%g">`,
		sz.w, sz.h, sz.w, sz.h, template.HTMLEscapeString(label), peak)
	// Value axis: gridlines with their values.
	for i := 0; i <= sz.yTicks; i++ {
		v := top * float64(i) / float64(sz.yTicks)
		fmt.Fprintf(&b, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, sz.left, y(v), sz.w-sz.right, y(v))
		fmt.Fprintf(&b, `<text class="ylabel" x="%d" y="%.1f">%s</text>`, sz.left-4, y(v)+3.5, axisNumber(v))
	}
	// Bars.
	slot := plotW / float64(max(n, 1))
	bar := max(slot-1, 1)
	for i := range n {
		c, f := val(completed, i), val(failed, i)
		x := float64(sz.left) + float64(i)*slot
		start := since.Add(time.Duration(i) * chartBucket)
		fmt.Fprintf(&b, `<g class="bar"><title>%s: %s completed, %s failed</title>`,
			start.Local().Format("15:04 MST"), axisNumber(c), axisNumber(f))
		// An invisible full-height target, so the tooltip shows on empty
		// minutes too.
		fmt.Fprintf(&b, `<rect class="hit" x="%.1f" y="%d" width="%.1f" height="%.1f"/>`, x, sz.top, bar, plotH)
		if c > 0 {
			fmt.Fprintf(&b, `<rect class="done" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, x, y(c), bar, y(0)-y(c))
		}
		if f > 0 {
			fmt.Fprintf(&b, `<rect class="fail" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, x, y(c+f), bar, y(c)-y(c+f))
		}
		b.WriteString(`</g>`)
	}
	// Time axis: the baseline and evenly spaced times, the last one "now".
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, sz.left, y(0), sz.w-sz.right, y(0))
	end := since.Add(time.Duration(n) * chartBucket)
	for i := 0; i < sz.xLabels; i++ {
		frac := float64(i) / float64(sz.xLabels-1)
		at := since.Add(time.Duration(frac * float64(end.Sub(since))))
		x := float64(sz.left) + frac*plotW
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case sz.xLabels - 1:
			anchor = "end"
		}
		text := at.Local().Format("15:04")
		if i == sz.xLabels-1 {
			text = at.Local().Format("15:04 MST")
		}
		fmt.Fprintf(&b, `<text class="xlabel" x="%.1f" y="%d" text-anchor="%s">%s</text>`, x, sz.h-3, anchor, text)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// axisNumber formats a count for an axis or a tooltip: 12, 1.5k, 2.3M.
func axisNumber(v float64) string {
	switch {
	case v >= 1e6:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e6), ".0") + "M"
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e3), ".0") + "k"
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
