// Command quickstart shows skiplock end to end, as an application of your
// own uses it: it migrates the database that DATABASE_URL names, enqueues a
// few tasks, works them with a worker, and prints what happened to each. It
// imports skiplock's public packages only, so you can copy it into a module
// of your own.
//
//	export DATABASE_URL='postgres://app@localhost:5432/app?search_path=skiplock_demo'
//	psql "postgres://app@localhost:5432/app" -c 'CREATE SCHEMA skiplock_demo'
//	go run ./examples/quickstart
//
// In skiplock's repository, `go run ./cmd/skiplock-quickstart` runs it with
// nothing set up: it finds PostgreSQL (or boots a throwaway server), gives
// the example a scratch schema and drops it afterwards.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, os.Getenv("DATABASE_URL")); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// connect opens a pool on databaseURL and checks that the server answers,
// saying in one line what is wrong when it does not.
func connect(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	if databaseURL == "" {
		return nil, errors.New("DATABASE_URL is not set: export DATABASE_URL=postgres://user@host:5432/dbname " +
			"(add ?search_path=SCHEMA to keep skiplock's tables in a schema of their own)")
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		// pgx reports each connection attempt on a line of its own (each
		// host, and with sslmode=prefer each twice); the last says why.
		msg := err.Error()
		if i := strings.LastIndex(msg, "\n"); i >= 0 {
			msg = strings.TrimSpace(msg[i:])
		}
		return nil, fmt.Errorf("cannot connect to DATABASE_URL: %s", msg)
	}
	return pool, nil
}

func run(ctx context.Context, stdout io.Writer, databaseURL string) error {
	out := &syncWriter{w: stdout} // handlers print from the worker's goroutines
	pool, err := connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	// skiplock's tables go where the URL's search_path points.
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	var schema string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return err
	}
	version, _, err := migrations.Version(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Migrated schema %s to version %d.\n\n", schema, version)
	client := queue.New(pool)

	// Producer side.
	var ids []int64
	for _, to := range []string{"ada@example.com", "grace@example.com", "linus@example.com"} {
		res, err := client.Enqueue(ctx, "email.send", email{To: to, Subject: "Welcome"})
		if err != nil {
			return err
		}
		ids = append(ids, res.ID)
	}
	// Enqueued in the caller's transaction: it exists only because the
	// transaction commits.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := client.EnqueueTx(ctx, tx, "report.build", map[string]string{"period": "2026-11"}, queue.WithPriority(-1))
		ids = append(ids, res.ID)
		return err
	})
	if err != nil {
		return err
	}
	res, err := client.Enqueue(ctx, "payment.capture", map[string]int{"cents": 4200}, queue.WithMaxAttempts(3))
	if err != nil {
		return err
	}
	ids = append(ids, res.ID)
	res, err = client.Enqueue(ctx, "image.resize", map[string]string{"url": "broken.png"}, queue.WithMaxAttempts(2))
	if err != nil {
		return err
	}
	ids = append(ids, res.ID)
	fmt.Fprintf(out, "Enqueued %d tasks.\n", len(ids))

	// Consumer side.
	var captureCalls atomic.Int32
	handlers := worker.Handlers{
		"email.send": func(ctx context.Context, t *worker.Task) error {
			var e email
			if err := t.Decode(&e); err != nil {
				return err
			}
			fmt.Fprintf(out, "  task %d: sending %q to %s\n", t.ID, e.Subject, e.To)
			return nil
		},
		"report.build": func(ctx context.Context, t *worker.Task) error {
			fmt.Fprintf(out, "  task %d: building the monthly report (enqueued in a transaction)\n", t.ID)
			return nil
		},
		"payment.capture": func(ctx context.Context, t *worker.Task) error {
			if captureCalls.Add(1) == 1 {
				fmt.Fprintf(out, "  task %d: payment gateway timed out on attempt %d; will retry\n", t.ID, t.Attempt)
				return errors.New("gateway timeout")
			}
			fmt.Fprintf(out, "  task %d: payment captured on attempt %d\n", t.ID, t.Attempt)
			return nil
		},
		"image.resize": func(ctx context.Context, t *worker.Task) error {
			fmt.Fprintf(out, "  task %d: cannot decode image (attempt %d of %d)\n", t.ID, t.Attempt, t.MaxAttempts)
			return errors.New("image: unknown format")
		},
	}
	w := worker.New(pool, worker.Config{
		Concurrency:  4,
		PollInterval: 100 * time.Millisecond,
		// Quick retries for the demo; the default backs off from 1s to 1h.
		RetryBackoff: func(int) time.Duration { return 200 * time.Millisecond },
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	workCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	done := make(chan error, 1)
	go func() { done <- w.Run(workCtx, handlers) }()

	fmt.Fprintln(out, "Worker running:")
	unfinished := queue.Filter{Statuses: []queue.Status{queue.StatusPending, queue.StatusRetrying, queue.StatusRunning}, IDs: ids}
	for {
		left, err := client.List(ctx, unfinished, queue.Page{})
		if err != nil {
			return err
		}
		if len(left) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return errors.New("tasks did not finish in time")
		case err := <-done:
			return fmt.Errorf("worker stopped: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopWorker()
	if err := <-done; err != nil {
		return err
	}

	fmt.Fprintln(out, "\nWhat happened:")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tATTEMPTS\tERRORS")
	for _, id := range ids {
		t, err := client.Get(ctx, id)
		if err != nil {
			return err
		}
		var errs []string
		for _, e := range t.Errors {
			errs = append(errs, fmt.Sprintf("#%d %s", e.Attempt, e.Error))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\n", t.ID, t.Name, t.Status, t.Attempt, t.MaxAttempts, strings.Join(errs, "; "))
	}
	tw.Flush()
	fmt.Fprintln(out, "\nFailed tasks stay in the table until an operator requeues them (skiplock requeue --failed) or purges them.")
	return nil
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
