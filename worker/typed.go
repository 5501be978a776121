package worker

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/skiplock/skiplock/queue"
)

// TaskOf is a claimed task with its payload decoded as a T, as a handler
// registered with Handle sees it.
type TaskOf[T queue.TaskArgs] struct {
	*Task
	// Args is the task's payload.
	Args T
}

// Handle registers fn in handlers as the handler of T's tasks, under the
// name T's zero value gives (TaskName), so that the name is written once,
// on the type:
//
//	handlers := worker.Handlers{}
//	worker.Handle(handlers, func(ctx context.Context, t *worker.TaskOf[Email]) error {
//		return send(ctx, t.Args.To)
//	})
//
// The payload is decoded before fn is called. A payload that is not a T
// (not JSON, or a field of the wrong type) fails the task for good on its
// first attempt, without calling fn, with one error that names the task
// and the type; the task keeps its payload, for `skiplock show` and a
// requeue once a handler can read it. Fields that T lacks are ignored.
//
// Handle panics if handlers is nil, if the name is empty, or if the name
// already has a handler: mistakes of the program's own wiring, made when
// it starts.
func Handle[T queue.TaskArgs](handlers Handlers, fn func(ctx context.Context, t *TaskOf[T]) error) {
	var zero T
	name := zero.TaskName()
	switch {
	case handlers == nil:
		panic(fmt.Sprintf("skiplock: worker.Handle[%T]: nil Handlers", zero))
	case name == "":
		panic(fmt.Sprintf("skiplock: worker.Handle[%T]: TaskName is empty", zero))
	case handlers[name] != nil:
		panic(fmt.Sprintf("skiplock: worker.Handle[%T]: task name %q already has a handler", zero, name))
	}
	handlers[name] = func(ctx context.Context, t *Task) error {
		tt := &TaskOf[T]{Task: t}
		if err := json.Unmarshal(t.Payload, &tt.Args); err != nil {
			return Permanent(fmt.Errorf("decoding payload of task %d (%s) as %T: %w", t.ID, t.Name, zero, err))
		}
		return fn(ctx, tt)
	}
}
