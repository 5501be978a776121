// Command skiplock-bench measures skiplock against a PostgreSQL server: work
// throughput, enqueue, latency, scaling and a sustained load; and, as
// `skiplock-bench compare`, side by side with River, Graphile Worker and the
// bare SQL cycle; and, as `skiplock-bench migrations`, how long each
// migration stops enqueues and claims on a busy queue. See docs/PERFORMANCE.md for the method and the numbers,
// and --help (or compare -help) for flags.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/bench"
	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/compare"
	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/migrationlocks"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var code int
	switch args := os.Args[1:]; {
	case len(args) > 0 && args[0] == "compare":
		code = compare.Command(ctx, args[1:], os.Stdout, os.Stderr)
	case len(args) > 0 && args[0] == "migrations":
		code = migrationlocks.Command(ctx, args[1:], os.Stdout, os.Stderr)
	default:
		code = bench.Command(ctx, nil, args, os.Stdout, os.Stderr)
	}
	stop()
	os.Exit(code)
}
