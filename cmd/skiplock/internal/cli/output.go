package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/skiplock/skiplock/internal/humanize"
	"github.com/skiplock/skiplock/queue"
)

// printJSON writes v as indented JSON, one document per command.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns to w; call flush when done.
func table(w io.Writer, header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	return tw
}

func row(tw *tabwriter.Writer, cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(tw, strings.Join(parts, "\t"))
}

// confirm asks question on Stderr and reads the answer from Stdin, unless
// yes. Without a person at Stdin it refuses: a script must say --yes. Not
// confirmed, whether refused or answered no, is ExitError, as the help
// says.
func (a *app) confirm(yes bool, question string) error {
	if yes {
		return nil
	}
	if !a.env.Interactive {
		return fmt.Errorf("%s: refusing without confirmation, as stdin is not a terminal (pass --yes); nothing was changed", question)
	}
	fmt.Fprintf(a.env.Stderr, "%s [y/N] ", question)
	answer, err := bufio.NewReader(a.env.Stdin).ReadString('\n')
	if err != nil && answer == "" {
		fmt.Fprintln(a.env.Stderr)
		return errNotConfirmed
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return errNotConfirmed
}

// progress reports bulk work on Stderr: redrawn in place on a terminal, at
// most a line a second elsewhere (logs).
type progress struct {
	w        io.Writer
	terminal bool
	interval time.Duration
	verb     string
	total    int64

	mu      sync.Mutex
	last    time.Time
	printed bool
}

func (a *app) progress(verb string, total int64) *progress {
	if a.json {
		return &progress{w: io.Discard, verb: verb, total: total}
	}
	interval := a.env.ProgressInterval
	switch {
	case interval > 0:
	case a.env.StderrIsTerminal:
		interval = 100 * time.Millisecond
	default:
		interval = time.Second
	}
	return &progress{w: a.env.Stderr, terminal: a.env.StderrIsTerminal, interval: interval, verb: verb, total: total, last: time.Now()}
}

func (p *progress) update(done int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < p.interval {
		return
	}
	p.last = time.Now()
	p.printed = true
	line := fmt.Sprintf("%s %s of %s tasks (%d%%)", p.verb, count(done), count(p.total), percent(done, p.total))
	if p.terminal {
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

// done ends a redrawn line.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal && p.printed {
		fmt.Fprintln(p.w)
	}
}

func percent(done, total int64) int64 {
	if total <= 0 {
		return 100
	}
	return min(done*100/total, 100)
}

// count formats n with thousands separators: 1,234,567.
func count(n int64) string { return humanize.Count(n) }

func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return count(n) + " " + many
}

// parseIDs reads task IDs from positional arguments.
func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, s := range args {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return nil, usageErrorf("%q is not a task ID (want a positive integer)", s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// parseDuration reads a duration of a flag in the one syntax every flag
// takes: Go's (90s, 1h30m) with days and weeks (7d, 2w, 1d12h).
func parseDuration(flag, s string) (time.Duration, error) {
	d, err := humanize.ParseDuration(s)
	if err != nil {
		return 0, usageErrorf("--%s %q is %v", flag, s, err)
	}
	return d, nil
}

// durationFlag is a flag that takes a duration, read by parseDuration.
type durationFlag time.Duration

// durationVar registers a duration flag on fl: every flag that takes a
// duration is one, so that 7d works wherever 168h does.
func durationVar(fl *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fl.Var((*durationFlag)(p), name, usage)
}

func (d *durationFlag) Set(s string) error {
	v, err := humanize.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationFlag(v)
	return nil
}

func (d *durationFlag) String() string { return time.Duration(*d).String() }
func (d *durationFlag) Type() string   { return "duration" }

// parseSince reads a point in time: a duration ago (2h, 7d) or an RFC 3339
// time (2026-01-02T15:04:05Z) or date (2026-01-02, UTC).
func parseSince(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, err := parseDuration(flag, s); err == nil {
		return now.Add(-d), nil
	}
	return time.Time{}, usageErrorf("--%s %q is neither a duration ago (2h, 7d) nor a time (2026-01-02T15:04:05Z, 2026-01-02)", flag, s)
}

// parseStatuses reads --status values (repeated, or comma separated)
// against the statuses a command accepts.
func parseStatuses(values []string, allowed []queue.Status, why map[queue.Status]string) ([]queue.Status, error) {
	var out []queue.Status
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			st := queue.Status(strings.TrimSpace(strings.ToLower(s)))
			if reason, ok := why[st]; ok {
				return nil, usageErrorf("--status %s: %s", st, reason)
			}
			if !slices.Contains(allowed, st) {
				return nil, usageErrorf("--status %q is not one of %s", s, joinStatuses(allowed))
			}
			if !slices.Contains(out, st) {
				out = append(out, st)
			}
		}
	}
	return out, nil
}

func joinStatuses(ss []queue.Status) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}

// ago formats how long before now t was: 3s, 4m12s, 2h5m, 3d4h.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return short(time.Since(t))
}

// short formats a duration for a table: 3s, 9m40s, 2h5m, 3d4h.
func short(d time.Duration) string { return humanize.Duration(d) }

// stamp formats a time for people: local, to the second.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}

func stampPtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}

// clip shortens s to one line of at most n runes.
func clip(s string, n int) string {
	s = oneLine(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
