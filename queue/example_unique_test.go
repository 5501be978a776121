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
// another task with it inserts nothing and returns the holder's ID, as a
// duplicate, with no error. WithDuplicateError makes it an error too.
func ExampleWithUniqueKey() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	first, _ := q.Enqueue(ctx, "invoice.send", map[string]int{"invoice": 7}, queue.WithUniqueKey("invoice-7"))
	again, err := q.Enqueue(ctx, "invoice.send", map[string]int{"invoice": 7}, queue.WithUniqueKey("invoice-7"))
	fmt.Println("duplicate:", again.Duplicate, err)
	fmt.Println("same task:", again.ID == first.ID)

	_, err = q.Enqueue(ctx, "invoice.send", map[string]int{"invoice": 7}, queue.WithUniqueKey("invoice-7"), queue.WithDuplicateError())
	var dup *queue.DuplicateError
	fmt.Println("as an error:", errors.Is(err, queue.ErrDuplicate), errors.As(err, &dup) && dup.Key == "invoice-7" && dup.ExistingID == first.ID)

	// WithUnique derives the key from the name and the payload; with a
	// window, the key is unique within each window, whatever the status.
	a, _ := q.Enqueue(ctx, "report.build", map[string]string{"day": "2026-11-23"}, queue.WithUnique(), queue.WithUniqueWindow(time.Hour))
	b, err := q.Enqueue(ctx, "report.build", map[string]string{"day": "2026-11-23"}, queue.WithUnique(), queue.WithUniqueWindow(time.Hour))
	fmt.Println("derived key, same window:", b.Duplicate, b.ID == a.ID, err)
	// Output:
	// duplicate: true <nil>
	// same task: true
	// as an error: true true
	// derived key, same window: true true <nil>
}
