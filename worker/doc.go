// Package worker is skiplock's consumer side: a pool of goroutines that
// claims tasks from PostgreSQL, runs their handlers, and records the
// outcome.
//
//	handlers := worker.Handlers{
//		"email.send": func(ctx context.Context, t *worker.Task) error {
//			e, err := worker.Decode[Email](t)
//			if err != nil {
//				return err
//			}
//			return send(ctx, e)
//		},
//	}
//	if err := worker.Run(handlers); err != nil { // DATABASE_URL, SIGTERM-aware
//		log.Fatal(err)
//	}
//
// A payload type that names its task (queue.TaskArgs) has a typed handler:
//
//	worker.Handle(handlers, func(ctx context.Context, t *worker.TaskOf[Email]) error {
//		return send(ctx, t.Args)
//	})
//
// A batch handler (BatchHandler, HandleBatch) runs many tasks of one name
// in one call, each task keeping its own outcome, attempts and history.
//
// Config.Retry, OnError and OnPanic decide what a failed attempt leads to;
// Worker.Stop and StopAndCancel end Run gently or at once. Package
// worker/skiplocktest tests code that uses skiplock.
//
// Each running task is guarded by a session-level advisory lock held on the
// worker's lock session, one connection per process. When a worker process
// dies, PostgreSQL drops its locks and the elected rescuer returns its tasks
// to the queue within seconds; a worker that merely lost its session has its
// handlers' contexts cancelled and cannot overwrite a task that was rescued.
// Failed attempts are retried with exponential backoff; a panic is an error
// with its stack; a shutdown, graceful or not, returns unfinished tasks to
// the queue without spending an attempt.
package worker
