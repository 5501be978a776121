package compare

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/bench"
)

const usage = `Usage: skiplock-bench compare [flags]

Runs skiplock side by side with River, Graphile Worker and the bare SQL
cycle of a SKIP LOCKED + advisory-lock queue, on one PostgreSQL server, and
prints one table: each system's best rate over the rounds, every round's,
and skiplock's ratio to it. Each system works N no-op tasks that were
enqueued before its workers started (no VACUUM in between), timed until all
are durably completed, in its own process, on a database created fresh for
it (DROP DATABASE ... WITH (FORCE), CREATE DATABASE); the rounds run the
systems in turn, so that a busy machine's drift skews them alike. Progress
goes to stderr, the table (or -json) to stdout.

Graphile Worker runs in Node.js: the first run installs graphile-worker with
npm ci (it needs node and npm: apt-get install nodejs npm).

Examples (from the repository's root):
  go run ./cmd/skiplock-bench compare
  go run ./cmd/skiplock-bench compare -n 50000 -rounds 3 -enqueue single
  go run ./cmd/skiplock-bench compare -systems skiplock,river -relay-delay 1ms
  go run ./cmd/skiplock-bench compare -also 'before=/tmp/old-bench --peer-line'

The server: -admin-dsn, else $PEER_ADMIN_DSN, else $DATABASE_URL's server
(its database postgres), else ` + DefaultAdminDSN + `.

Flags:
`

// ChildArg, followed by a system's name, runs that system's side in this
// process (the hidden mode the compare starts itself in), with PEER_N,
// PEER_DSN and PEER_ENQUEUE from the environment.
const ChildArg = "--compare-child"

// Command is `skiplock-bench compare`: it parses args (after "compare")
// and returns the exit code.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == ChildArg {
		if err := child(ctx, args[1], stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "skiplock-bench compare %s: %v\n", args[1], err)
			return 1
		}
		return 0
	}

	fs := flag.NewFlagSet("skiplock-bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	var o Options
	fs.IntVar(&o.N, "n", DefaultN, "tasks each system works per round")
	fs.IntVar(&o.Rounds, "rounds", DefaultRounds, "rounds; the table shows each system's best and every round")
	fs.StringVar(&o.Enqueue, "enqueue", EnqueueMany, "skiplock's enqueue `path`: many (EnqueueMany) or single (16 producers calling Enqueue); -also commands get it in PEER_ENQUEUE")
	systems := fs.String("systems", strings.Join(Systems, ","), "comma-separated `systems` to run, of "+strings.Join(Systems, ", "))
	fs.StringVar(&o.AdminDSN, "admin-dsn", "", "PostgreSQL `URL` the databases are created and dropped with (see above for the default)")
	fs.Func("relay-delay", "put every system behind a TCP relay on 127.0.0.1 that holds each chunk this `duration` each way (0: the relay alone, the baseline); the round trip it gives is measured and shown", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		o.Relay, o.RelayDelay = true, d
		return nil
	})
	fs.Func("also", "an extra system, `NAME=COMMAND`: a shell command run like skiplock's peer line (PEER_N, PEER_DSN), its rate the last work_per_s it prints; repeatable", func(s string) error {
		name, command, ok := strings.Cut(s, "=")
		if !ok {
			return errors.New("want NAME=COMMAND")
		}
		o.Also = append(o.Also, Also{Name: strings.TrimSpace(name), Command: command})
		return nil
	})
	fs.BoolVar(&o.JSON, "json", false, "print the report as JSON")
	fs.DurationVar(&o.Timeout, "timeout", DefaultTimeout, "give up on a system's run after this long")
	fs.BoolVar(&o.Keep, "keep", false, "keep each system's database of the last round (dropped by default)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "skiplock-bench compare: unexpected argument %q (see -help)\n", fs.Arg(0))
		return 2
	}
	o.Systems = []string{}
	for _, s := range strings.Split(*systems, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.Systems = append(o.Systems, s)
		}
	}
	o.Progress = stderr
	if _, err := o.withDefaults(); err != nil {
		fmt.Fprintf(stderr, "skiplock-bench compare: %v\n", err)
		return 2
	}
	if _, err := Run(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "skiplock-bench compare: %v\n", err)
		return 1
	}
	return 0
}

// child runs one system's side: PEER_N tasks into the fresh database
// PEER_DSN; it prints work_per_s=RATE last.
func child(ctx context.Context, system string, stdout, stderr io.Writer) error {
	n, err := strconv.Atoi(os.Getenv("PEER_N"))
	if err != nil || n <= 0 {
		return fmt.Errorf("PEER_N must be a positive number of tasks, got %q", os.Getenv("PEER_N"))
	}
	dsn := os.Getenv("PEER_DSN")
	if dsn == "" {
		return errors.New("PEER_DSN is not set")
	}
	switch system {
	case Skiplock:
		return bench.PeerLine(ctx, bench.PeerOptions{N: n, DSN: dsn, Enqueue: os.Getenv("PEER_ENQUEUE")}, stdout, stderr)
	case River:
		return runRiver(ctx, n, dsn, stdout, stderr)
	case Cycle:
		return runCycle(ctx, n, dsn, stdout, stderr)
	}
	return fmt.Errorf("no such system %q", system)
}
