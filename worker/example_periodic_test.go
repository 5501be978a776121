package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/worker"
)

// A periodic task is enqueued on its schedule by one elected worker among
// all that declare it, once per tick however many run; its run time is the
// tick.
func ExamplePeriodicTask() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()

	var once sync.Once
	ticked := make(chan time.Time, 1)
	handlers := worker.Handlers{"cache.refresh": func(ctx context.Context, t *worker.Task) error {
		once.Do(func() { ticked <- t.RunAt })
		return nil
	}}
	w := worker.New(pool, worker.Config{
		// Every second for the example; Cron: "*/5 * * * *" or "@hourly"
		// take cron expressions.
		Periodic:     []worker.PeriodicTask{{Name: "refresh", Every: time.Second, Task: "cache.refresh"}},
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, stop := context.WithCancel(context.Background())
	finished := make(chan error)
	go func() { finished <- w.Run(ctx, handlers) }()

	tick := <-ticked
	stop()
	<-finished
	fmt.Println("ran for a tick on a whole second:", tick.Equal(tick.Truncate(time.Second)))
	// Output: ran for a tick on a whole second: true
}
