package queue

import (
	"context"
	"sync"
	"time"
)

// Group commit for Enqueue. A transaction that NOTIFYs holds a server-wide
// lock from the start of its commit to its end, WAL flush included, so
// concurrent single-task commits cannot share a flush: without grouping,
// any number of producers make about one commit per fsync. Here calls wait
// in a list, and a flusher sends whatever waits as one statement (one
// commit, one notification per queue) while the next calls gather.

const (
	groupFlushers  = 2    // statements in flight at once
	groupMax       = 1000 // tasks in one statement
	groupSendLimit = 30 * time.Second
)

type groupCommit struct {
	client   *Client
	mu       sync.Mutex
	waiting  []*groupReq
	flushing int // flushers running; they exit when nothing waits
}

type groupReq struct {
	ctx  context.Context
	row  row
	done chan groupResult
}

type groupResult struct {
	id  int64
	dup *DuplicateError
	err error
}

func (g *groupCommit) enqueue(ctx context.Context, r row) groupResult {
	req := &groupReq{ctx: ctx, row: r, done: make(chan groupResult, 1)}
	g.mu.Lock()
	g.waiting = append(g.waiting, req)
	start := g.flushing < groupFlushers
	if start {
		g.flushing++
	}
	g.mu.Unlock()
	if start {
		go g.flush()
	}
	return <-req.done
}

func (g *groupCommit) flush() {
	for {
		g.mu.Lock()
		if len(g.waiting) == 0 {
			g.flushing--
			g.mu.Unlock()
			return
		}
		n := min(len(g.waiting), groupMax)
		batch := g.waiting[:n:n]
		g.waiting = g.waiting[n:]
		g.mu.Unlock()

		// A call whose context ended before its statement was sent is
		// dropped; one that is sent waits for the outcome.
		live := batch[:0:0]
		rows := make([]row, 0, len(batch))
		for _, req := range batch {
			if err := req.ctx.Err(); err != nil {
				req.done <- groupResult{err: err}
				continue
			}
			live = append(live, req)
			rows = append(rows, req.row)
		}
		if len(live) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), groupSendLimit)
		ids, dups, err := g.client.insertRows(ctx, g.client.pool, rows, nil)
		cancel()
		byIndex := map[int]*DuplicateError{}
		for _, d := range dups {
			byIndex[d.Index] = d
		}
		for i, req := range live {
			switch {
			case err != nil:
				req.done <- groupResult{err: err}
			case byIndex[i] != nil:
				d := *byIndex[i]
				d.Index = 0
				req.done <- groupResult{dup: &d}
			default:
				req.done <- groupResult{id: ids[i]}
			}
		}
	}
}
