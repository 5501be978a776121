package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// Signup is a typed task whose handler records many at once.
type Signup struct {
	Email string `json:"email"`
}

func (Signup) TaskName() string { return "signup.record" }

func ExampleHandleBulk() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	if _, err := pool.Exec(ctx, "CREATE TABLE signups (email text PRIMARY KEY)"); err != nil {
		panic(err)
	}

	q := queue.New(pool)
	var tasks []queue.NewTask
	for _, email := range []string{"ada@example.com", "alan@example.com", "not-an-email", "grace@example.com", "edsger@example.com"} {
		tasks = append(tasks, queue.NewTask{Name: Signup{}.TaskName(), Payload: Signup{Email: email}})
	}
	if _, err := q.EnqueueMany(ctx, tasks); err != nil {
		panic(err)
	}

	handlers := worker.Handlers{}
	worker.HandleBulk(handlers, worker.BulkOf[Signup]{
		MaxSize: 100,
		MaxWait: 200 * time.Millisecond,
		Handle: func(ctx context.Context, tasks []*worker.TaskOf[Signup]) []error {
			errs := make([]error, len(tasks))
			var emails []string
			for i, t := range tasks {
				if !strings.Contains(t.Args.Email, "@") {
					errs[i] = worker.Permanent(fmt.Errorf("%q is not an email address", t.Args.Email))
					continue
				}
				emails = append(emails, t.Args.Email)
			}
			// One statement for the whole group.
			_, err := pool.Exec(ctx, "INSERT INTO signups SELECT unnest($1::text[]) ON CONFLICT DO NOTHING", emails)
			for i := range errs {
				if errs[i] == nil {
					errs[i] = err // nil, or the insert's error for every row of it
				}
			}
			fmt.Printf("one call of %d tasks, %d rows inserted in one statement\n", len(tasks), len(emails))
			return errs
		},
	})

	w := worker.New(pool, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, stop := context.WithCancel(ctx)
	finished := make(chan error)
	go func() { finished <- w.Run(ctx, handlers) }()
	for {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE status IN ('completed', 'failed')").Scan(&n)
		if n == len(tasks) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-finished

	rows, _ := pool.Query(context.Background(), "SELECT status, count(*) FROM skiplock_tasks GROUP BY status ORDER BY status")
	for rows.Next() {
		var status string
		var n int
		_ = rows.Scan(&status, &n)
		fmt.Println(status, n)
	}
	// Output:
	// one call of 5 tasks, 4 rows inserted in one statement
	// completed 4
	// failed 1
}
