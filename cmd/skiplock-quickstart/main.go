// Command skiplock-quickstart runs examples/quickstart on a machine where
// nothing is set up: it finds PostgreSQL (DATABASE_URL when set, else a
// server on 127.0.0.1:5432, else a throwaway cluster from the installed
// PostgreSQL binaries), gives the example a scratch schema, runs it there
// and drops the schema at the end unless -keep is given. The example itself
// reads only DATABASE_URL, so that it can be copied into any module; this
// command is the repository's harness around it.
//
//	go run ./cmd/skiplock-quickstart
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/connstr"
	"github.com/skiplock/skiplock/internal/testinfra/devpg"
)

// example is the quickstart's package, run with `go run`: a main package
// cannot be imported.
const example = "github.com/skiplock/skiplock/examples/quickstart"

const defaultSchema = "skiplock_quickstart"

func main() {
	keep := flag.Bool("keep", false, "keep the "+defaultSchema+" schema after the run")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, os.Stderr, *keep, defaultSchema); err != nil {
		fmt.Fprintln(os.Stderr, "skiplock-quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, stdout, stderr io.Writer, keep bool, schema string) error {
	srv, err := devpg.Find(ctx, devpg.Options{EnvVars: []string{"DATABASE_URL"}, Log: stdout})
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintf(stdout, "PostgreSQL: %s (%s)\n", connstr.Redact(srv.URL, srv.URL), srv.Source)

	// A schema of the example's own, so that it never touches other tables.
	admin, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+ident); err != nil {
		return err
	}
	if !keep {
		defer admin.Exec(context.Background(), "DROP SCHEMA "+ident+" CASCADE") //nolint:errcheck // a scratch schema
	}

	databaseURL := withSearchPath(srv.URL, schema)
	cmd := exec.CommandContext(ctx, "go", "run", example)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+databaseURL)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go run %s: %w", example, err)
	}
	if keep {
		fmt.Fprintf(stdout, "\nSchema %s is kept; this puts its failed tasks back:\n  skiplock requeue --failed --database-url '%s'\n",
			schema, connstr.Redact(databaseURL, databaseURL))
	} else {
		fmt.Fprintf(stdout, "\nThis run drops its schema %s now; run it with -keep to try that on its tasks.\n", schema)
	}
	return nil
}

// withSearchPath points a connection URL (or key=value string) at schema.
func withSearchPath(conn, schema string) string {
	u, err := url.Parse(conn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return conn + " search_path=" + schema
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
