package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/skiplock/skiplock/queue"
)

// Dependency is a task that the running task depended on, as
// DependencyOutputs returns it.
type Dependency struct {
	TaskID int64
	// Name is the task's name; Step its step name in a workflow enqueued
	// with queue.Client.EnqueueWorkflow ("" otherwise).
	Name string
	Step string
	// Status is completed unless the task waited on (and was released by)
	// a requeued dependency that has since changed.
	Status queue.Status
	// Output is what its handler recorded (SetOutput); nil for none.
	Output json.RawMessage
}

// Decode unmarshals the dependency's output into v. No output is an
// error.
func (d Dependency) Decode(v any) error {
	if d.Output == nil {
		return fmt.Errorf("skiplock: dependency %d (%s) recorded no output", d.TaskID, d.Name)
	}
	if err := json.Unmarshal(d.Output, v); err != nil {
		return fmt.Errorf("skiplock: decoding the output of dependency %d (%s): %w", d.TaskID, d.Name, err)
	}
	return nil
}

// DependencyOutputs returns the tasks that the task whose handler's
// context is ctx depends on (queue.WithDependsOn, a workflow step's
// DependsOn), in ID order, with their outputs. It reads them from the
// database when called, so a task that does not call it pays nothing. A
// dependency deleted since it completed (past its retention) is missing
// from the result. It returns an error outside a handler's context.
func DependencyOutputs(ctx context.Context) ([]Dependency, error) {
	s := scopeOf(ctx)
	if s == nil {
		return nil, errors.New("skiplock: DependencyOutputs called outside a task handler's context")
	}
	if err := s.claimCommitted(ctx); err != nil {
		return nil, fmt.Errorf("reading the dependencies of task %d: %w", s.taskID, err)
	}
	rows, err := s.worker.queries.TaskDependencyOutputs(ctx, s.worker.pool, s.taskID)
	if err != nil {
		return nil, fmt.Errorf("reading the dependencies of task %d: %w", s.taskID, err)
	}
	out := make([]Dependency, len(rows))
	for i, r := range rows {
		out[i] = Dependency{TaskID: r.ID, Name: r.Name, Step: r.Step, Status: queue.Status(r.Status), Output: r.Output}
	}
	return out, nil
}

// DependencyOutput decodes into v the output of the dependency whose step
// name (in a workflow) or else task name is step.
func DependencyOutput(ctx context.Context, step string, v any) error {
	deps, err := DependencyOutputs(ctx)
	if err != nil {
		return err
	}
	for _, d := range deps {
		if d.Step == step {
			return d.Decode(v)
		}
	}
	for _, d := range deps {
		if d.Step == "" && d.Name == step {
			return d.Decode(v)
		}
	}
	return fmt.Errorf("skiplock: task %d has no dependency named %q", scopeOf(ctx).taskID, step)
}
