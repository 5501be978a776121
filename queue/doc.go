// Package queue is skiplock's producer side: it enqueues tasks into
// PostgreSQL, on their own or inside the caller's transaction, and lets
// operators read and change them. Workers (package worker) claim and run
// the tasks; the schema comes from package migrations (or `skiplock
// migrate up`), and a schema not migrated gives migrations.ErrNotMigrated.
//
// Start with a [Client], made by [New] from a pgxpool.Pool (or [Default],
// from DATABASE_URL, behind the package-level [Enqueue]). A task is a name
// and a JSON payload; [Option] values (WithQueue, WithDelay,
// WithPriority, WithUniqueKey, ...) shape it:
//
//	q := queue.New(pool)
//	id, err := q.Enqueue(ctx, "email.send", Email{To: "ada@example.com"},
//		queue.WithQueue("mail"), queue.WithDelay(time.Minute))
//
//	// In the caller's transaction: the task exists if and only if tx commits.
//	id, err = q.EnqueueTx(ctx, tx, "invoice.send", invoice)
//
//	// A payload type that names its task (TaskArgs) and may carry its
//	// options (TaskDefaults).
//	id, err = q.EnqueueArgs(ctx, Email{To: "ada@example.com"})
//
// The writes that matter in a transaction have a Tx twin taking an
// [Executor] (a pgx.Tx in practice): EnqueueTx, EnqueueManyTx,
// RequeueTx, CancelTx, AddScheduleTx, ... Beyond one task: EnqueueMany (in
// one transaction, by COPY), EnqueueBatch (a group with callbacks),
// EnqueueWorkflow (steps that depend on each other), AddSchedule
// (periodic tasks).
//
// Operators read tasks and queues (Get, List, Stats) and change them
// (Requeue, Cancel, RunNow, Delete, Purge, each with a Tx twin, all
// returning a [ChangeResult]; PauseQueue, SetLimit), as the skiplock
// command and the dashboard (package queue/dashboard) do; who holds which
// lock, which workers are live and how much of each rate limit is used
// are theirs to show. Each change is audited with the actor of its
// context ([WithActor], Client.AuditLog), one record per call.
//
// An error reads from the operation that failed to its cause, as in
// "requeueing tasks: skiplock: invalid request: ...": only the package's
// sentinel errors (ErrNotFound, ErrInvalidRequest, ...) begin with
// "skiplock: ", so they come last, and errors.Is finds them.
//
// Runnable examples, against a real database: ExampleClient_EnqueueTx,
// ExampleWithDelay, ExampleWithUniqueKey, ExampleWithSequence,
// ExampleWithDebounce, ExampleWorkflow_options, ExampleClient_AddSchedule,
// ExampleClient_Cancel, ExampleClient_PauseQueue, ExampleClient_SetLimit,
// ExampleClient_AuditLog, ExampleWithEncryption.
//
// The guides, in the repository's docs/: TASKS.md (producing and
// consuming, options, limits, typed tasks), SCHEDULING.md (delays, unique
// tasks, periodic tasks, rate and concurrency limits), WORKFLOWS.md,
// CLI.md (the same operations from the command line), OPERATIONS.md
// (roles, the audit trail, upgrades), SQL.md (the schema).
package queue
