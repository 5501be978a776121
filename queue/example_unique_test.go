package queue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// A unique key holds while its task is pending or running: enqueueing
// another task with it inserts nothing and returns the holder's ID.
func ExampleWithUniqueKey() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	first, _ := q.Enqueue(ctx, "invoice.send", map[string]int{"invoice": 7}, queue.WithUniqueKey("invoice-7"))
	again, err := q.Enqueue(ctx, "invoice.send", map[string]int{"invoice": 7}, queue.WithUniqueKey("invoice-7"))
	var dup *queue.DuplicateError
	fmt.Println("duplicate:", errors.Is(err, queue.ErrDuplicate), errors.As(err, &dup) && dup.Key == "invoice-7")
	fmt.Println("same task:", again == first)

	// WithUnique derives the key from the name and the payload; with a
	// window, the key is unique within each window, whatever the status.
	a, _ := q.Enqueue(ctx, "report.build", map[string]string{"day": "2026-11-23"}, queue.WithUnique(), queue.WithUniqueWindow(time.Hour))
	b, err := q.Enqueue(ctx, "report.build", map[string]string{"day": "2026-11-23"}, queue.WithUnique(), queue.WithUniqueWindow(time.Hour))
	fmt.Println("derived key, same window:", b == a, errors.Is(err, queue.ErrDuplicate))
	// Output:
	// duplicate: true true
	// same task: true
	// derived key, same window: true true
}
