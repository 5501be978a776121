// Package migrationlocks is `skiplock-bench migrations`: how long each
// migration stops producers and workers on a busy queue.
package migrationlocks

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/devpg"
	"github.com/skiplock/skiplock/migrations"
)

const usage = `Usage: skiplock-bench migrations [flags]

Measures how long each migration stops enqueues and claims on a busy
queue. In a fresh schema it applies the migrations up to -from, fills
skiplock_tasks with -finished completed and -pending pending tasks (one
INSERT ... SELECT generate_series, then VACUUM ANALYZE), and starts a
producer (one INSERT of a task at a time) and a worker loop (claim one task
with FOR UPDATE SKIP LOCKED, then complete it), each on a connection of its
own, recording every call's latency. Then, for each migration after -from
in turn, it waits -settle, applies that one migration (as skiplock migrate
up would, through golang-migrate), waits -settle again and prints a line:
the migration's wall time, and the longest enqueue and claim (claim and
complete) that overlapped it: the stall that migration causes. The quiet
column is the longest call in the -settle before the migration, the noise
floor. Stepping from -from to the newest version is also what one
migrate up from -from does; the table's maxima are that run's stalls.

The loops use only the columns of migration 1, so they run at every
version; their statements take the table locks that the library's enqueue
and claim take on skiplock_tasks (ROW EXCLUSIVE, row locks), and fire the
triggers each version has.

Examples (from the repository's root):
  go run ./cmd/skiplock-bench migrations
  go run ./cmd/skiplock-bench migrations -finished 1000000 -pending 100000
  go run ./cmd/skiplock-bench migrations -from 17 -finished 100000 -pending 10000

The server: -database-url, else DATABASE_URL, else a local server, else a
throwaway cluster. The schema is dropped at the end.

Flags:
`

// Options is one run of the measurement.
type Options struct {
	DatabaseURL string
	Finished    int           // completed tasks in the table before the first step
	Pending     int           // pending tasks in the table before the first step
	From        uint          // the version the table is filled at
	To          uint          // the last version applied
	Settle      time.Duration // loops alone before and after each migration
}

// Command is `skiplock-bench migrations`: it parses args (after
// "migrations") and returns the exit code.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("skiplock-bench migrations", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	versions := migrations.Versions()
	o := Options{}
	fs.StringVar(&o.DatabaseURL, "database-url", "", "PostgreSQL `URL`; defaults to DATABASE_URL, then a local server, then a throwaway cluster")
	fs.IntVar(&o.Finished, "finished", 1_000_000, "completed tasks in skiplock_tasks before the first step")
	fs.IntVar(&o.Pending, "pending", 100_000, "pending tasks in skiplock_tasks before the first step")
	from := fs.Uint("from", uint(versions[0]), "the schema `version` the table is filled at; each migration after it is measured")
	to := fs.Uint("to", uint(migrations.Latest), "the last `version` applied")
	fs.DurationVar(&o.Settle, "settle", 2*time.Second, "how long the loops run alone before and after each migration")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	o.From, o.To = *from, *to
	if err := o.validate(versions); err != nil {
		fmt.Fprintf(stderr, "skiplock-bench migrations: %v\n", err)
		return 2
	}
	if o.DatabaseURL == "" {
		srv, err := devpg.Find(ctx, devpg.Options{EnvVars: []string{"DATABASE_URL"}, Log: stderr})
		if err != nil {
			fmt.Fprintf(stderr, "skiplock-bench migrations: %v\n", err)
			return 1
		}
		if srv.Source == "throwaway" {
			defer srv.Close()
		}
		o.DatabaseURL = srv.URL
	}
	res, err := Run(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "skiplock-bench migrations: %v\n", err)
		return 1
	}
	res.print(stdout)
	return 0
}

func (o Options) validate(versions []uint) error {
	switch {
	case o.Finished < 0:
		return fmt.Errorf("-finished %d: want 0 or more", o.Finished)
	case o.Pending < 1:
		return fmt.Errorf("-pending %d: want at least 1 (the worker loop claims them)", o.Pending)
	case !slices.Contains(versions, o.From):
		return fmt.Errorf("-from %d: no such migration (the versions are %s)", o.From, versionList(versions))
	case !slices.Contains(versions, o.To) || o.To <= o.From:
		return fmt.Errorf("-to %d: want a migration after -from %d (the versions are %s)", o.To, o.From, versionList(versions))
	case o.Settle <= 0:
		return fmt.Errorf("-settle %s: want a positive duration", o.Settle)
	}
	return nil
}

func versionList(vs []uint) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.FormatUint(uint64(v), 10)
	}
	return strings.Join(s, ", ")
}

// Result is a run's measurements.
type Result struct {
	Server   string // PostgreSQL's version
	Finished int
	Pending  int
	Fill     time.Duration // filling and vacuuming the table
	Steps    []Step
}

// Step is one migration's measurements.
type Step struct {
	From, To     uint
	Wall         time.Duration // the migration's wall time
	EnqueueStall time.Duration // the longest enqueue overlapping it
	ClaimStall   time.Duration // the longest claim and complete overlapping it
	Quiet        time.Duration // the longest call of either loop in the settle before it
	Enqueues     int           // enqueues overlapping it
	Claims       int           // claims overlapping it
}

func (r Result) print(w io.Writer) {
	fmt.Fprintf(w, "PostgreSQL %s; skiplock_tasks filled with %d completed and %d pending tasks at version %d (%s); one producer and one worker loop.\n\n",
		r.Server, r.Finished, r.Pending, r.Steps[0].From, r.Fill.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tmigration\tenqueue stall\tclaim stall\tquiet\tenqueues\tclaims\t")
	var worst Step
	for _, s := range r.Steps {
		fmt.Fprintf(tw, "%d → %d\t%s\t%s\t%s\t%s\t%d\t%d\t\n", s.From, s.To, ms(s.Wall), ms(s.EnqueueStall), ms(s.ClaimStall), ms(s.Quiet), s.Enqueues, s.Claims)
		worst.Wall += s.Wall
		worst.EnqueueStall = max(worst.EnqueueStall, s.EnqueueStall)
		worst.ClaimStall = max(worst.ClaimStall, s.ClaimStall)
		worst.Quiet = max(worst.Quiet, s.Quiet)
		worst.Enqueues += s.Enqueues
		worst.Claims += s.Claims
	}
	fmt.Fprintf(tw, "%d → %d\t%s\t%s\t%s\t%s\t%d\t%d\t\n", r.Steps[0].From, r.Steps[len(r.Steps)-1].To,
		ms(worst.Wall), ms(worst.EnqueueStall), ms(worst.ClaimStall), ms(worst.Quiet), worst.Enqueues, worst.Claims)
	tw.Flush()
}

func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
