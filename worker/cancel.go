package worker

import (
	"context"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/control"
)

// A running task is cancelled on request (queue.Client.Cancel) by
// two ways to this worker: the control.Cancel command, which the listener
// hands to handleControl at once, and the request's mark on the task's
// row, which the cancel poller reads every HealthInterval in case the
// command was missed.

// handleControl handles a command from the control channel.
func (w *Worker) handleControl(msg string) {
	if id, ok := control.ParseCancel(msg); ok {
		w.cancelTasks([]int64{id})
	}
	if msg == control.Suspects {
		w.iso.tell()
	}
	if msg == control.Schedules {
		select {
		case w.schedulesChanged <- struct{}{}:
		default:
		}
	}
}

// cancelTasks cancels the handlers of the given tasks, if they run here.
func (w *Worker) cancelTasks(ids []int64) {
	want := make(map[int64]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	for _, e := range w.inflightSnapshot() {
		if want[e.task.ID] && context.Cause(e.ctx) == nil {
			w.log.Info("skiplock: cancelling task on request", "task_id", e.task.ID, "name", e.task.Name)
			w.cancelExecution(e, ErrCancelled)
		}
	}
}

// cancelPoller looks, every interval, for cancellation requests of running
// tasks whose command was missed. Each look is bounded, so that a silent
// network delays it but nothing else.
type cancelPoller struct {
	queries  *db.Queries
	pool     db.DBTX
	interval time.Duration
	running  func() []*execution
	cancel   func(ids []int64)
}

func (p *cancelPoller) run(ctx context.Context) { every(ctx, p.interval, p.poll) }

// poll asks once which running tasks have a cancel request.
func (p *cancelPoller) poll(ctx context.Context) {
	running := p.running()
	if len(running) == 0 {
		return
	}
	ids := make([]int64, len(running))
	for i, e := range running {
		ids[i] = e.task.ID
	}
	qctx, cancel := context.WithTimeout(ctx, max(p.interval, 5*time.Second))
	cancelled, err := p.queries.TaskCancelRequested(qctx, p.pool, ids)
	cancel()
	if err == nil && len(cancelled) > 0 {
		p.cancel(cancelled)
	}
}
