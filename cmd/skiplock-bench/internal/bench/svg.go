package bench

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// chart is a line chart, written as a self-contained SVG file so that the
// bench can draw its own results without a plotting dependency.
type chart struct {
	Title  string
	XLabel string
	YLabel string
	LogX   bool
	LogY   bool
	// XTicks, when set, replaces the automatic ticks of the x axis (the
	// labels of a categorical axis, say).
	XTicks []tick
	Series []series
	// Notes are small lines of text under the title.
	Notes []string
}

type tick struct {
	V     float64
	Label string
}

type series struct {
	Name   string
	Points []point
	Dashed bool
}

type point struct{ X, Y float64 }

// palette: distinguishable and legible on white, in print and for the most
// common colour blindness.
var palette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000"}

const (
	chartW, chartH = 760, 440
	marginL        = 78
	marginR        = 24
	marginB        = 58
)

// WriteSVG draws the chart. Points with non-positive coordinates on a log
// axis, or NaN, are left out.
func (c chart) WriteSVG(w io.Writer) error {
	marginT := 46 + 14*len(c.Notes)
	pw, ph := float64(chartW-marginL-marginR), float64(chartH-marginT-marginB)

	xs, ys := c.extent()
	if len(xs) == 0 {
		xs, ys = []float64{0, 1}, []float64{0, 1}
	}
	xAxis := newAxis(xs, c.LogX, false)
	yAxis := newAxis(ys, c.LogY, true)
	if len(c.XTicks) > 0 {
		xAxis.ticks = c.XTicks
	}
	px := func(x float64) float64 { return float64(marginL) + xAxis.pos(x)*pw }
	py := func(y float64) float64 { return float64(marginT) + (1-yAxis.pos(y))*ph }

	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<text x="%d" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", marginL, esc(c.Title))
	for i, n := range c.Notes {
		p(`<text x="%d" y="%d" fill="#555555" font-size="11">%s</text>`+"\n", marginL, 38+14*i, esc(n))
	}

	// Grid and ticks.
	for _, t := range yAxis.ticks {
		y := py(t.V)
		p(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", marginL, y, float64(marginL)+pw, y)
		p(`<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle" fill="#333333">%s</text>`+"\n", marginL-6, y, esc(t.Label))
	}
	for _, t := range xAxis.ticks {
		x := px(t.V)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#eeeeee"/>`+"\n", x, marginT, x, float64(marginT)+ph)
		p(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333333">%s</text>`+"\n", x, float64(marginT)+ph+18, esc(t.Label))
	}
	p(`<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#999999"/>`+"\n", marginL, marginT, pw, ph)
	p(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", float64(marginL)+pw/2, chartH-14, esc(c.XLabel))
	p(`<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", float64(marginT)+ph/2, esc(c.YLabel))

	// Lines, points and legend.
	for i, s := range c.Series {
		color := palette[i%len(palette)]
		var pts []string
		for _, pt := range s.Points {
			if !xAxis.valid(pt.X) || !yAxis.valid(pt.Y) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(pt.X), py(pt.Y)))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		if len(pts) > 1 {
			p(`<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", color, dash, strings.Join(pts, " "))
		}
		if len(pts) <= 60 {
			for _, xy := range pts {
				x, y, _ := strings.Cut(xy, ",")
				p(`<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n", x, y, color)
			}
		}
		ly := marginT + 16 + 18*i
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", marginL+12, ly, marginL+36, ly, color, dash)
		p(`<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", marginL+42, ly, esc(s.Name))
	}
	p("</svg>\n")
	return b.Flush()
}

func (c chart) extent() (xs, ys []float64) {
	for _, s := range c.Series {
		for _, pt := range s.Points {
			if math.IsNaN(pt.X) || math.IsNaN(pt.Y) || (c.LogX && pt.X <= 0) || (c.LogY && pt.Y <= 0) {
				continue
			}
			xs = append(xs, pt.X)
			ys = append(ys, pt.Y)
		}
	}
	for _, t := range c.XTicks {
		xs = append(xs, t.V)
	}
	return xs, ys
}

// axis maps data values to [0, 1].
type axis struct {
	lo, hi float64
	log    bool
	ticks  []tick
}

func newAxis(values []float64, log, fromZero bool) axis {
	lo, hi := values[0], values[0]
	for _, v := range values {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	a := axis{log: log}
	if log {
		a.lo = math.Pow(10, math.Floor(math.Log10(lo)))
		a.hi = math.Pow(10, math.Ceil(math.Log10(hi)))
		if a.hi <= a.lo {
			a.hi = a.lo * 10
		}
		decades := math.Log10(a.hi / a.lo)
		for d := a.lo; d <= a.hi*1.0001; d *= 10 {
			for _, m := range []float64{1, 2, 5} {
				v := d * m
				if v > a.hi*1.0001 || (decades > 3 && m != 1) {
					continue
				}
				a.ticks = append(a.ticks, tick{v, shortNumber(v)})
			}
		}
		return a
	}
	if fromZero && lo > 0 {
		lo = 0
	}
	if hi == lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	a.lo = math.Floor(lo/step) * step
	a.hi = math.Ceil(hi/step) * step
	for v := a.lo; v <= a.hi+step/2; v += step {
		a.ticks = append(a.ticks, tick{v, shortNumber(v)})
	}
	return a
}

func (a axis) valid(v float64) bool { return !math.IsNaN(v) && (!a.log || v > 0) }

func (a axis) pos(v float64) float64 {
	if a.log {
		return math.Log10(v/a.lo) / math.Log10(a.hi/a.lo)
	}
	return (v - a.lo) / (a.hi - a.lo)
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// shortNumber formats a tick label: 0.5, 20, 1.5k, 2M.
func shortNumber(v float64) string {
	av := math.Abs(v)
	switch {
	case av >= 1e6:
		return trimZeros(fmt.Sprintf("%.2f", v/1e6)) + "M"
	case av >= 1e4:
		return trimZeros(fmt.Sprintf("%.1f", v/1e3)) + "k"
	case av >= 1:
		return trimZeros(fmt.Sprintf("%.2f", v))
	case av == 0:
		return "0"
	default:
		return trimZeros(fmt.Sprintf("%.3f", v))
	}
}

func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
