package queue_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// A schedule stored in the database is picked up by workers already
// running, within seconds, and can be changed, paused and removed while
// they run.
func ExampleClient_AddSchedule() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	ran := make(chan string, 10)
	w := worker.New(pool, worker.Config{
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	finished := make(chan error)
	go func() {
		finished <- w.Run(runCtx, worker.Handlers{"cache.refresh": func(ctx context.Context, t *worker.Task) error {
			ran <- string(t.Payload)
			return nil
		}})
	}()

	// Added while the worker runs: its next tick is enqueued.
	err := q.AddSchedule(ctx, queue.Schedule{
		Name: "refresh", Every: time.Second, Task: "cache.refresh", Payload: []byte(`{"region":"eu"}`),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ran with", <-ran)

	if err := q.PauseSchedule(ctx, "refresh"); err != nil {
		fmt.Println(err)
		return
	}
	list, _ := q.Schedules(ctx)
	fmt.Printf("%s: %s, paused %v\n", list[0].Name, list[0].Spec(), list[0].Paused)

	// Bad input is refused, naming what is wrong.
	fmt.Println(q.AddSchedule(ctx, queue.Schedule{Name: "typo", Cron: "0 25 * * *", Task: "cache.refresh"}))
	fmt.Println(q.RemoveSchedule(ctx, "nope"))

	if err := q.RemoveSchedule(ctx, "refresh"); err != nil {
		fmt.Println(err)
	}
	stop()
	<-finished
	// Output:
	// ran with {"region": "eu"}
	// refresh: every 1s, paused true
	// skiplock: invalid request: schedule "typo": cron expression "0 25 * * *" does not parse: end of range (25) above maximum (23): 25
	// removing schedule "nope": skiplock: schedule not found
}
