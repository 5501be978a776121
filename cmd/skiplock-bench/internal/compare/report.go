package compare

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// writeTable prints the conditions, what each system runs, and the one
// table: system | best tasks/s | each round | skiplock's ratio.
func writeTable(w io.Writer, rep *Report) error {
	c := rep.Conditions
	path := "direct"
	switch c.Relay {
	case "":
	case "0s":
		path = "through the relay, no delay added"
	default:
		path = "through the relay, adding " + c.Relay + " each way"
	}
	enqueue := c.Enqueue + " (skiplock EnqueueMany; the others bulk-insert)"
	if c.Enqueue == EnqueueSingle {
		enqueue = c.Enqueue + " (skiplock: 16 producers calling Enqueue; the others bulk-insert)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "skiplock-bench compare: %s no-op tasks enqueued before the workers start (no VACUUM in between), timed from the workers' start until all are durably completed;\n", thousands(float64(c.N)))
	fmt.Fprintf(&b, "%d round(s), the systems interleaved, each in its own process on a fresh database of one server\n", c.Rounds)
	fmt.Fprintf(&b, "server: PostgreSQL %s, autovacuum %s, round trip %.3f ms (median of 50 SELECT 1, %s)\n", c.Server, c.Autovacuum, c.RoundTripMS, path)
	fmt.Fprintf(&b, "machine: %d CPUs, %s; enqueue: %s\n", c.CPUs, c.Go, enqueue)
	for _, r := range rep.Systems {
		fmt.Fprintf(&b, "  %-10s %s\n", r.Name, r.Detail)
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}

	// Right-aligned numbers; the names padded to one width stay on the left.
	width := len("system")
	for _, r := range rep.Systems {
		width = max(width, len(r.Name))
	}
	name := func(s string) string { return s + strings.Repeat(" ", width-len(s)) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := name("system") + "\tbest tasks/s\t"
	for i := range c.Rounds {
		head += "round " + strconv.Itoa(i+1) + "\t"
	}
	head += "skiplock's ratio\tCPU µs/task\t"
	fmt.Fprintln(tw, head)
	for _, r := range rep.Systems {
		row := name(r.Name) + "\t" + rate(r.Best) + "\t"
		for _, v := range r.Rounds {
			row += rate(v) + "\t"
		}
		ratio := "-"
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2fx", r.Ratio)
		}
		row += ratio + "\t"
		cpu := "-"
		if r.CPU != nil {
			cpu = fmt.Sprintf("%.1f", r.CPU.Machine)
		}
		row += cpu + "\t"
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes strings.Builder
	for _, r := range rep.Systems {
		if r.CPU != nil && r.CPU.Split {
			fmt.Fprintf(&notes, "%s: %.1f µs of its own process's CPU per task, %.1f of its server backends'\n", r.Name, r.CPU.Client, r.CPU.Server)
		}
	}
	if notes.Len() > 0 {
		if _, err := fmt.Fprintf(w, "CPU µs/task: the whole machine's busy CPU during the best round's work phase, per task\n%s", notes.String()); err != nil {
			return err
		}
	}
	for _, r := range rep.Systems {
		for _, e := range r.Errors {
			if _, err := fmt.Fprintf(w, "%s: %s\n", r.Name, e); err != nil {
				return err
			}
		}
	}
	return nil
}

func rate(v float64) string {
	if v <= 0 {
		return "failed"
	}
	return thousands(v)
}

func writeJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// thousands formats v rounded to an integer, with commas: 31,234.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
