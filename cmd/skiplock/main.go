// Command skiplock operates skiplock work queues: requeue failed tasks,
// inspect and cancel tasks, see who holds which task, migrate the schema.
// Run `skiplock --help`; docs/CLI.md describes every command.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.OSEnv())
	stop()
	os.Exit(code)
}
