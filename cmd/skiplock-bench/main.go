// Command skiplock-bench measures skiplock against a PostgreSQL server: work
// throughput, enqueue, latency, scaling and a sustained load. See
// docs/PERFORMANCE.md for the method and the numbers, and --help for flags.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := bench.Command(ctx, nil, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
