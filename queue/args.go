package queue

import (
	"context"
	"fmt"
)

// TaskArgs is a payload type that names its task, so that producers and
// handlers share one Go type instead of a name and a payload kept in step
// by hand:
//
//	type Email struct {
//		To string `json:"to"`
//	}
//
//	func (Email) TaskName() string { return "email.send" }
//
//	res, err := q.EnqueueArgs(ctx, Email{To: "ada@example.com"})
//
// The payload is the value as encoding/json marshals it. TaskName must
// work on the zero value (a value receiver): worker.Handle calls it on one
// to register the handler.
type TaskArgs interface {
	TaskName() string
}

// TaskDefaults is implemented by a TaskArgs type that has options of its
// own, such as its queue, max attempts or timeout. They apply to every
// task of the type, before the options of the call, which override them:
//
//	func (Email) TaskOptions() []queue.Option {
//		return []queue.Option{queue.WithQueue("mail"), queue.WithMaxAttempts(5)}
//	}
type TaskDefaults interface {
	TaskArgs
	TaskOptions() []Option
}

// NewTaskFrom is the NewTask of args, for EnqueueMany: its name from
// TaskName, its payload args itself, its options the type's TaskOptions
// (if it has them) followed by opts.
func NewTaskFrom(args TaskArgs, opts ...Option) NewTask {
	if args == nil {
		return NewTask{}
	}
	if d, ok := args.(TaskDefaults); ok {
		opts = append(append([]Option(nil), d.TaskOptions()...), opts...)
	}
	return NewTask{Name: args.TaskName(), Payload: args, Options: opts}
}

// EnqueueArgs is Enqueue of a typed task: NewTaskFrom(args, opts...).
func (c *Client) EnqueueArgs(ctx context.Context, args TaskArgs, opts ...Option) (EnqueueResult, error) {
	t, err := taskFrom(args, opts)
	if err != nil {
		return EnqueueResult{}, err
	}
	return c.Enqueue(ctx, t.Name, t.Payload, t.Options...)
}

// EnqueueArgsTx is EnqueueTx of a typed task: NewTaskFrom(args, opts...).
func (c *Client) EnqueueArgsTx(ctx context.Context, tx Executor, args TaskArgs, opts ...Option) (EnqueueResult, error) {
	t, err := taskFrom(args, opts)
	if err != nil {
		return EnqueueResult{}, err
	}
	return c.EnqueueTx(ctx, tx, t.Name, t.Payload, t.Options...)
}

// EnqueueArgs inserts a typed task through the default client; see
// Client.EnqueueArgs.
func EnqueueArgs(ctx context.Context, args TaskArgs, opts ...Option) (EnqueueResult, error) {
	c, err := Default()
	if err != nil {
		return EnqueueResult{}, err
	}
	return c.EnqueueArgs(ctx, args, opts...)
}

// EnqueueArgsTx inserts a typed task within tx through the default client;
// see Client.EnqueueArgsTx.
func EnqueueArgsTx(ctx context.Context, tx Executor, args TaskArgs, opts ...Option) (EnqueueResult, error) {
	c, err := Default()
	if err != nil {
		return EnqueueResult{}, err
	}
	return c.EnqueueArgsTx(ctx, tx, args, opts...)
}

func taskFrom(args TaskArgs, opts []Option) (NewTask, error) {
	if args == nil {
		return NewTask{}, fmt.Errorf("%w: nil TaskArgs", ErrInvalidTask)
	}
	return NewTaskFrom(args, opts...), nil
}
