// Package queue is skiplock's producer side: it enqueues tasks into
// PostgreSQL, on their own or inside the caller's transaction, and reads
// them back.
//
//	q := queue.New(pool)
//	id, err := q.Enqueue(ctx, "email.send", Email{To: "ada@example.com"},
//		queue.WithQueue("mail"), queue.WithDelay(time.Minute))
//
//	// The task exists if and only if tx commits.
//	id, err = q.EnqueueTx(ctx, tx, "invoice.send", invoice)
//
//	// A payload type that names its task, and may carry its options
//	// (TaskArgs, TaskDefaults).
//	id, err = q.EnqueueArgs(ctx, Email{To: "ada@example.com"})
//
// Workers (package worker) claim and run the tasks. The schema must be
// migrated first (package migrations, or `skiplock migrate up`).
//
// Operators inspect and change tasks through the same Client (List,
// Requeue, Cancel, Purge, PauseQueue, SetLimit, ...), as the skiplock
// command and the dashboard (package queue/dashboard) do. Every such change
// is recorded in the audit trail with the actor of its context:
//
//	ctx = queue.WithActor(ctx, queue.Actor{Name: "alice@example.com"})
//	res, err := q.Requeue(ctx, queue.RequeueRequest{IDs: ids})
//	log, err := q.AuditLog(ctx, queue.AuditFilter{Since: time.Now().Add(-24 * time.Hour)})
package queue
