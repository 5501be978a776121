// Command quickstart shows skiplock end to end: it finds PostgreSQL (or
// boots a throwaway server), migrates a schema of its own, enqueues a few
// tasks, works them with a worker, and prints what happened to each.
//
//	go run ./examples/quickstart
//
// It uses DATABASE_URL when set, else a server on 127.0.0.1:5432, else a
// throwaway cluster from the installed PostgreSQL binaries. Its schema
// (skiplock_quickstart) is dropped at the end unless -keep is given.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/devpg"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

const schema = "skiplock_quickstart"

func main() {
	keep := flag.Bool("keep", false, "keep the "+schema+" schema after the run")
	flag.Parse()
	if err := run(*keep); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func run(keep bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	srv, err := devpg.Find(ctx, devpg.Options{EnvVars: []string{"DATABASE_URL"}, Log: os.Stdout})
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Printf("PostgreSQL: %s (%s)\n", redact(srv.URL), srv.Source)

	// A schema of our own, so the example never touches other tables.
	admin, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
		return err
	}
	if !keep {
		defer admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	}
	cfg, err := pgxpool.ParseConfig(srv.URL)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	fmt.Printf("Migrated schema %s to version %d.\n\n", schema, migrations.Latest)

	// Producer side.
	client := queue.New(pool)
	var ids []int64
	for _, to := range []string{"ada@example.com", "grace@example.com", "linus@example.com"} {
		id, err := client.Enqueue(ctx, "email.send", email{To: to, Subject: "Welcome"})
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	// Enqueued in the caller's transaction: it exists only because the
	// transaction commits.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		id, err := client.EnqueueTx(ctx, tx, "report.build", map[string]string{"period": "2026-11"}, queue.WithPriority(-1))
		ids = append(ids, id)
		return err
	})
	if err != nil {
		return err
	}
	id, err := client.Enqueue(ctx, "payment.capture", map[string]int{"cents": 4200}, queue.WithMaxAttempts(3))
	if err != nil {
		return err
	}
	ids = append(ids, id)
	id, err = client.Enqueue(ctx, "image.resize", map[string]string{"url": "broken.png"}, queue.WithMaxAttempts(2))
	if err != nil {
		return err
	}
	ids = append(ids, id)
	fmt.Printf("Enqueued %d tasks.\n", len(ids))

	// Consumer side.
	var captureCalls atomic.Int32
	handlers := worker.Handlers{
		"email.send": func(ctx context.Context, t *worker.Task) error {
			e, err := worker.Decode[email](t)
			if err != nil {
				return err
			}
			fmt.Printf("  task %d: sending %q to %s\n", t.ID, e.Subject, e.To)
			return nil
		},
		"report.build": func(ctx context.Context, t *worker.Task) error {
			fmt.Printf("  task %d: building the monthly report (enqueued in a transaction)\n", t.ID)
			return nil
		},
		"payment.capture": func(ctx context.Context, t *worker.Task) error {
			if captureCalls.Add(1) == 1 {
				fmt.Printf("  task %d: payment gateway timed out on attempt %d; will retry\n", t.ID, t.Attempt)
				return errors.New("gateway timeout")
			}
			fmt.Printf("  task %d: payment captured on attempt %d\n", t.ID, t.Attempt)
			return nil
		},
		"image.resize": func(ctx context.Context, t *worker.Task) error {
			fmt.Printf("  task %d: cannot decode image (attempt %d of %d)\n", t.ID, t.Attempt, t.MaxAttempts)
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
	done := make(chan error, 1)
	go func() { done <- w.Run(workCtx, handlers) }()

	fmt.Println("Worker running:")
	for {
		var unfinished int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE status IN ('pending', 'running')").Scan(&unfinished)
		if err != nil {
			stopWorker()
			return err
		}
		if unfinished == 0 {
			break
		}
		select {
		case <-ctx.Done():
			stopWorker()
			return errors.New("tasks did not finish within 2 minutes")
		case err := <-done:
			stopWorker()
			return fmt.Errorf("worker stopped: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopWorker()
	if err := <-done; err != nil {
		return err
	}

	fmt.Println("\nWhat happened:")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
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
	fmt.Println("\nFailed tasks stay in the table for an operator: `skiplock requeue --failed` puts them back.")
	return nil
}

// redact hides a password in a connection URL before printing it.
func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil || cfg.Password == "" {
		return url
	}
	return strings.Replace(url, cfg.Password, "****", 1)
}
