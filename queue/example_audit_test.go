package queue_test

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// An operator change made with an Actor in its context is recorded as made
// by that actor; AuditLog lists the records, the newest first.
func ExampleClient_AuditLog() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	q := queue.New(pool)

	// An admin page of your application, behind its login.
	ctx = queue.WithActor(ctx, queue.Actor{Name: "alice@example.com", Source: queue.SourceDashboard})
	if err := q.PauseQueue(ctx, "reports"); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := q.Enqueue(ctx, "report.build", map[string]string{"month": "2026-11"}, queue.WithQueue("reports")); err != nil {
		fmt.Println(err)
		return
	}

	records, err := q.AuditLog(context.Background(), queue.AuditFilter{Actor: "alice@example.com"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range records {
		fmt.Println(r.Action, r.Source, r.Affected)
	}
	// Output:
	// enqueue dashboard 1
	// pause dashboard 1
}
