package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/worker/lock"
)

func Example() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()

	// Two nodes of a service; each would have its own pool in real life.
	node1, _ := lock.New(pool, lock.Options{ID: "node-1"})
	defer node1.Close()
	node2, _ := lock.New(pool, lock.Options{ID: "node-2"})
	defer node2.Close()

	// A session lock: held until released, or until node-1's connection dies.
	// Wait at most 10s for it: the context bounds the wait.
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := node1.Acquire(wait, "billing:rebuild", lock.Exclusive)
	if err != nil {
		panic(err)
	}
	_, err = node2.TryAcquire(ctx, "billing:rebuild", lock.Exclusive)
	fmt.Println("node-2 refused:", errors.Is(err, lock.ErrNotAcquired))
	// ... rebuild, stopping if l.Context() ends: the lock was lost ...
	_ = l.Release(ctx)
	fmt.Println("after release:", context.Cause(l.Context()))

	// A lease, through a transaction pooler if need be, with a fencing token.
	lease, err := node2.TryLease(ctx, "exporter", 10*time.Second)
	if err != nil {
		panic(err)
	}
	_, err = node1.TryLease(ctx, "exporter", 10*time.Second)
	fmt.Println("node-1 refused:", errors.Is(err, lock.ErrNotAcquired))
	fmt.Println("token given:", lease.Token() > 0)
	_ = lease.Release(ctx)

	// One node runs the job; one calling at the same time would skip it.
	ran, err := lock.RunOnce(ctx, node1, "daily_report", func(ctx context.Context) error {
		fmt.Println("daily report sent")
		return nil
	})
	fmt.Println("ran:", ran, err)
	// Output:
	// node-2 refused: true
	// after release: skiplock: lock released
	// node-1 refused: true
	// token given: true
	// daily report sent
	// ran: true <nil>
}
