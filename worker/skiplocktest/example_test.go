package skiplocktest_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
	"github.com/skiplock/skiplock/worker/skiplocktest"
)

// signup is the application code under test: it creates a user and, in the
// same transaction, enqueues the welcome email.
func signup(ctx context.Context, q *queue.Client, tx pgx.Tx, email string) error {
	// ... INSERT INTO users ...
	_, err := q.EnqueueTx(ctx, tx, "email.welcome", map[string]string{"to": email, "template": "welcome-v2"},
		queue.WithQueue("mail"), queue.WithMaxAttempts(5))
	return err
}

func Example() {
	ctx := context.Background()
	t, done := pgtest.ExampleTB() // in a test: the *testing.T
	defer done()

	// A fresh migrated schema, dropped when the test ends.
	pool := skiplocktest.Schema(t, pgtest.Server(t).URL) // in a test: os.Getenv("TEST_DATABASE_URL")
	q := queue.New(pool)

	tx, _ := pool.Begin(ctx)
	defer tx.Rollback(ctx)
	if err := signup(ctx, q, tx, "ada@example.com"); err != nil {
		panic(err)
	}
	// Seen in the transaction, before it commits; the payload needs only
	// contain what the test cares about.
	task := skiplocktest.RequireEnqueued(t, tx, "email.welcome", &skiplocktest.Want{
		Payload: map[string]string{"to": "ada@example.com"},
		Queue:   "mail",
	})
	skiplocktest.RequireNotEnqueued(t, tx, "email.reminder", nil)
	tx.Commit(ctx)

	// Run the task's handler once, as a worker with this Config would.
	w := worker.New(pool, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	res := skiplocktest.Work(ctx, t, w, worker.Handlers{
		"email.welcome": func(ctx context.Context, t *worker.Task) error {
			var p map[string]string
			if err := t.Decode(&p); err != nil {
				return err
			}
			fmt.Println("sending", p["template"], "to", p["to"])
			return nil
		},
	}, task.ID)
	fmt.Println(res.Status, "on attempt", res.Task.Attempt)
	// Output:
	// sending welcome-v2 to ada@example.com
	// completed on attempt 1
}
