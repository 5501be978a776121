package bench

import (
	"context"
	"sync"

	"github.com/skiplock/skiplock/queue"
)

// This file is a prototype, measured beside Client.Enqueue so that the lead
// can decide whether to build it into the queue package: group commit for
// single enqueues. Every Enqueue is its own transaction, and a transaction
// that NOTIFYs holds a server-wide lock from its commit's start to its end,
// WAL flush included: commits of concurrent Enqueue calls cannot share a
// flush, so throughput is about one commit per fsync, whatever the number
// of producers. The prototype hands concurrent calls to a few flushers, each
// inserting whatever accumulated while it was busy as one statement: one
// commit and one notification for many tasks, and no added wait for a lone
// producer, whose task is sent at once.

// groupEnqueuer batches concurrent Enqueue calls.
type groupEnqueuer struct {
	client   *queue.Client
	reqs     chan groupReq
	maxBatch int
	wg       sync.WaitGroup
}

type groupReq struct {
	ctx  context.Context
	task queue.NewTask
	done chan groupResult
}

type groupResult struct {
	id  int64
	err error
}

// newGroupEnqueuer starts flushers goroutines; stop ends them.
func newGroupEnqueuer(client *queue.Client, flushers, maxBatch int) *groupEnqueuer {
	g := &groupEnqueuer{client: client, reqs: make(chan groupReq), maxBatch: maxBatch}
	for range flushers {
		g.wg.Go(g.flush)
	}
	return g
}

// Enqueue inserts one task, sharing the statement and the commit with
// whatever other calls are waiting. The task exists when it returns nil.
func (g *groupEnqueuer) Enqueue(ctx context.Context, name string, payload any, opts ...queue.Option) (int64, error) {
	done := make(chan groupResult, 1)
	select {
	case g.reqs <- groupReq{ctx: ctx, task: queue.NewTask{Name: name, Payload: payload, Options: opts}, done: done}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	r := <-done
	return r.id, r.err
}

func (g *groupEnqueuer) stop() {
	close(g.reqs)
	g.wg.Wait()
}

func (g *groupEnqueuer) flush() {
	batch := make([]groupReq, 0, g.maxBatch)
	tasks := make([]queue.NewTask, 0, g.maxBatch)
	for first := range g.reqs {
		batch, tasks = append(batch[:0], first), append(tasks[:0], first.task)
	collect:
		for len(batch) < g.maxBatch {
			select {
			case r, ok := <-g.reqs:
				if !ok {
					break collect
				}
				batch, tasks = append(batch, r), append(tasks, r.task)
			default:
				break collect
			}
		}
		// One statement on the pool: it commits on its own, no BEGIN and
		// COMMIT round trips. A real implementation would drop the calls
		// whose context ended and validate each task alone, so that one bad
		// task does not fail its neighbours.
		ids, err := g.client.EnqueueManyTx(context.WithoutCancel(first.ctx), g.client.Pool(), tasks)
		for i, r := range batch {
			if err != nil {
				r.done <- groupResult{err: err}
			} else {
				r.done <- groupResult{id: ids[i]}
			}
		}
	}
}
