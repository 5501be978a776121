// Package worker is skiplock's consumer side: a pool of goroutines that
// claims tasks from PostgreSQL (enqueued with package queue), runs their
// handlers, and records each outcome.
//
// Start with [Handlers], a map from task name to [Handler]. [Run] is the
// whole main of a consumer binary (DATABASE_URL, stops gracefully on
// SIGINT or SIGTERM); [New] with a pgxpool.Pool and a [Config] gives a
// [Worker] whose Run takes a context:
//
//	handlers := worker.Handlers{
//		"email.send": func(ctx context.Context, t *worker.Task) error {
//			var e Email
//			if err := t.Decode(&e); err != nil {
//				return err
//			}
//			return send(ctx, e) // ctx ends on shutdown, timeout or cancel
//		},
//	}
//	w := worker.New(pool, worker.Config{Concurrency: 20, Queues: []string{"mail"}})
//	if err := w.Run(ctx, handlers); err != nil { // until ctx ends
//		log.Fatal(err)
//	}
//
// [Task.Decode] reads an untyped handler's payload; a payload type that
// names its task (queue.TaskArgs) has a typed handler, [Handle], whose
// [TaskOf] carries the decoded Args; [HandleBulk] and [BulkHandler] run
// many tasks of one name in one call, each task keeping its own outcome.
//
// A handler's error is retried with exponential backoff while the task
// has attempts left (Config.Retry states the whole retry model);
// [Permanent], [Cancel], [Snooze] and [RetryAfter] say otherwise, and a
// panic is an error with its stack; Config.OnError and OnPanic decide what
// a failed attempt leads to. Worker.Stop finishes running tasks,
// Worker.StopAndCancel cancels them; both return unfinished tasks to the
// queue without spending an attempt.
//
// Each running task is guarded by a session-level advisory lock on the
// worker's lock session, one connection per process (or by a lease row:
// ModeLease, behind PgBouncer in transaction mode). When a worker process
// dies, PostgreSQL drops its locks and the elected rescuer returns its
// tasks to the queue within seconds; a worker that merely lost its session
// has its handlers' contexts cancelled and cannot overwrite a task that
// was rescued. A schema not migrated stops Run with
// migrations.ErrNotMigrated.
//
// Runnable examples, against a real database: ExampleWorker_Run,
// ExampleHandle, ExampleHandleBulk, ExampleConfig_onError,
// ExampleWorker_StopAndCancel, ExampleRateLimit, ExampleRateLimit_perKey,
// ExamplePeriodicTask, ExampleWorker_AddQueue, ExampleModeLease,
// ExampleSetOutput, ExampleSaveCheckpoint, ExampleDependencyOutputs,
// ExampleBatchInfo. Package worker/skiplocktest tests code that uses
// skiplock; package worker/lock gives application code the same locks;
// module worker/observe adds Prometheus and OpenTelemetry.
//
// The guides, in the repository's docs/: TASKS.md (consuming, bulk
// handlers, retries, configuration, output, checkpoints), SCHEDULING.md
// (rate limits, periodic tasks, queues at run time), RELIABILITY.md (what
// happens when a process, the network or the database fails),
// OPERATIONS.md (connections, poolers, roles), OBSERVABILITY.md,
// TESTING.md.
package worker
