package ui

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/db"
)

// Throughput charts cover chartWindow in chartBuckets buckets.
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

func (s *Server) readThroughput(ctx context.Context) (throughput, error) {
	return s.throughput.get(func() (throughput, error) {
		// Aligned buckets, so that a refresh does not shift every bar.
		since := time.Now().Truncate(chartBucket).Add(chartBucket - chartWindow)
		rows, err := s.queries.QueueThroughput(ctx, s.client.Pool(), db.QueueThroughputParams{
			Since: since, BucketSeconds: chartBucket.Seconds(),
		})
		if err != nil {
			return throughput{}, fmt.Errorf("reading throughput: %w", err)
		}
		tp := throughput{since: since, completed: map[string][]float64{}, failed: map[string][]float64{}}
		for _, r := range rows {
			m := tp.completed
			if r.Status == "failed" {
				m = tp.failed
			}
			if m[r.Queue] == nil {
				m[r.Queue] = make([]float64, chartBuckets)
			}
			if r.Bucket >= 0 && int(r.Bucket) < chartBuckets {
				m[r.Queue][r.Bucket] += float64(r.Finished)
			}
		}
		return tp, nil
	})
}

// queueDepth reads the queues (cached for a second) and records the due
// counts for the depth charts.
func (s *Server) queueDepth(ctx context.Context) ([]db.QueueDepthRow, error) {
	return s.depth.get(func() ([]db.QueueDepthRow, error) {
		rows, err := s.queries.QueueDepth(ctx, s.client.Pool())
		if err != nil {
			return nil, fmt.Errorf("reading queues: %w", err)
		}
		s.history.add(time.Now(), rows)
		return rows, nil
	})
}

// history keeps the due count of each queue over the last chartWindow,
// sampled by this process: the depth of a queue in the past is not in the
// table.
type history struct {
	mu      sync.Mutex
	samples []depthSample
}

type depthSample struct {
	at  time.Time
	due map[string]float64
}

func (h *history) add(at time.Time, rows []db.QueueDepthRow) {
	due := make(map[string]float64, len(rows))
	for _, r := range rows {
		due[r.Queue] = float64(r.Due)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = append(h.samples, depthSample{at: at, due: due})
	cut := 0
	for cut < len(h.samples) && at.Sub(h.samples[cut].at) > chartWindow {
		cut++
	}
	h.samples = h.samples[cut:]
}

// series returns a queue's due counts in chartBuckets buckets, the last
// sample of each, carried forward, from the first sample (at most
// chartWindow ago) to now. A dashboard that just started has a short
// chart spread over the whole width rather than a dot at its end.
func (h *history) series(queue string, now time.Time) []float64 {
	out := make([]float64, chartBuckets)
	for i := range out {
		out[i] = math.NaN()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) == 0 {
		return out
	}
	start := h.samples[0].at
	span := max(now.Sub(start), time.Second)
	for _, s := range h.samples {
		i := int(float64(s.at.Sub(start)) / float64(span) * chartBuckets)
		if i >= 0 && i < chartBuckets {
			out[i] = s.due[queue]
		} else if i == chartBuckets {
			out[i-1] = s.due[queue]
		}
	}
	// Depth holds between samples: carry each one forward.
	for i := 1; i < len(out); i++ {
		if math.IsNaN(out[i]) {
			out[i] = out[i-1]
		}
	}
	return out
}

// sparkline draws values (NaN for gaps) as an inline SVG of w×h pixels,
// scaled to top (or to the largest value when top is 0). It holds numbers
// only, so it is safe to emit unescaped.
func sparkline(values []float64, top float64, class, label string) template.HTML {
	const w, h = 160, 28
	if top <= 0 {
		for _, v := range values {
			if !math.IsNaN(v) && v > top {
				top = v
			}
		}
	}
	if top <= 0 {
		top = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark %s" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		template.HTMLEscapeString(class), w, h, w, h, template.HTMLEscapeString(label))
	fmt.Fprintf(&b, `<line class="base" x1="0" y1="%d" x2="%d" y2="%d"/>`, h-1, w, h-1)
	step := float64(w) / float64(max(len(values)-1, 1))
	var path strings.Builder
	var area strings.Builder
	open := false
	var first float64
	last := 0.0
	closeArea := func() {
		if open {
			fmt.Fprintf(&area, "L%.1f %d L%.1f %dZ", last, h-1, first, h-1)
		}
	}
	for i, v := range values {
		if math.IsNaN(v) {
			closeArea()
			open = false
			continue
		}
		x := float64(i) * step
		y := float64(h-2) - (v/top)*float64(h-4)
		if !open {
			fmt.Fprintf(&path, "M%.1f %.1f", x, y)
			fmt.Fprintf(&area, "M%.1f %d L%.1f %.1f", x, h-1, x, y)
			first = x
			open = true
		} else {
			fmt.Fprintf(&path, "L%.1f %.1f", x, y)
			fmt.Fprintf(&area, "L%.1f %.1f", x, y)
		}
		last = x
	}
	closeArea()
	if path.Len() > 0 {
		fmt.Fprintf(&b, `<path class="area" d="%s"/><path class="line" d="%s"/>`, area.String(), path.String())
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
