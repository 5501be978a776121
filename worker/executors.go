package worker

import (
	"context"
	"sync/atomic"
	"time"
)

// executors run handlers on goroutines that outlive their task: one that
// finishes an attempt waits for the next rather than exiting, so a busy
// worker does not start a goroutine per task and grow its stack again each
// time (together, about a sixth of the worker's CPU per task when
// measured; docs/PERFORMANCE.md, "The worker's own cost"). Their number
// never exceeds the most executions this worker ever ran at once; they end
// with Run.
type executors struct {
	work chan *execution
	quit chan struct{}
	// For tests: goroutines started, and those waiting for work.
	started, idle atomic.Int64
}

func newExecutors() *executors {
	return &executors{work: make(chan *execution), quit: make(chan struct{})}
}

// start runs e with run on an idle executor, or on a new one if none is
// idle.
func (x *executors) start(e *execution, run func(*execution)) {
	select {
	case x.work <- e:
	default:
		x.started.Add(1)
		go x.loop(e, run)
	}
}

func (x *executors) loop(e *execution, run func(*execution)) {
	for {
		run(e)
		x.idle.Add(1)
		select {
		case e = <-x.work:
			x.idle.Add(-1)
		case <-x.quit:
			x.idle.Add(-1)
			return
		}
	}
}

// stop ends the idle executors, and each busy one once its handler returns.
func (x *executors) stop() { close(x.quit) }

// abandonOverdue abandons the executions whose handler is still running
// AbandonAfter past their timeout. One loop does it for every execution,
// rather than a timer per task: it looks a few times per AbandonAfter, so
// an execution is abandoned within a quarter of AbandonAfter (at most a
// second) of its time.
func (w *Worker) abandonOverdue(ctx context.Context) {
	every := min(max(w.cfg.AbandonAfter/4, 10*time.Millisecond), time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, e := range w.inflightSnapshot() {
				if !e.abandonAt.IsZero() && now.After(e.abandonAt) {
					w.abandon(e)
				}
			}
		}
	}
}
