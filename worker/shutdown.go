package worker

import (
	"context"
	"sync"
	"time"
)

// Shutting down: Run's end (shutdown), and Stop and StopAndCancel, which
// ask for it from another goroutine.

// stopRequests are Stop's and StopAndCancel's requests to end Run, and the
// news that it has ended: graceful closes on either request, hard on
// StopAndCancel's; ran closes when a started Run returns.
type stopRequests struct {
	graceful, hard         chan struct{}
	gracefulOnce, hardOnce sync.Once
	ran                    chan struct{}
}

func newStopRequests() stopRequests {
	return stopRequests{graceful: make(chan struct{}), hard: make(chan struct{}), ran: make(chan struct{})}
}

// Stop shuts the worker down gracefully, as the end of Run's context does:
// claiming stops, running handlers get Config.ShutdownGrace to finish,
// the rest are cancelled and their tasks go back to pending without
// spending an attempt. It returns once Run has returned, or ctx's error if
// ctx ends first (the shutdown goes on; StopAndCancel hurries it). Stop
// before Run makes Run return at once, having run nothing.
func (w *Worker) Stop(ctx context.Context) error {
	w.stops.gracefulOnce.Do(func() { close(w.stops.graceful) })
	return w.waitRun(ctx)
}

// StopAndCancel shuts the worker down without the grace period: claiming
// stops and every running handler's context is cancelled at once
// (context.Cause is a shutdown). A task whose handler then returns nil is
// completed; one that returns an error (its context's, or any other)
// counts as the shutdown's, not the task's: the task goes back to pending
// with its attempt given back and its place in line (run_at) kept, and its
// history records a shutdown entry. A Snooze or Cancel it returns stands;
// a panic is recorded as a panic, a bug of the handler's own (OnPanic
// decides). A handler that ignores its context is
// abandoned after Config.AbandonAfter, its task handed back the same way
// (the goroutine is left to end on its own: it may still be running when
// the task runs again elsewhere). It returns once Run has returned, or
// ctx's error if ctx ends first. It may follow a Stop whose grace is not
// over.
func (w *Worker) StopAndCancel(ctx context.Context) error {
	w.stops.hardOnce.Do(func() { close(w.stops.hard) })
	w.stops.gracefulOnce.Do(func() { close(w.stops.graceful) })
	return w.waitRun(ctx)
}

func (w *Worker) waitRun(ctx context.Context) error {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-w.stops.ran:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown waits for running handlers for up to ShutdownGrace, then cancels
// the rest; it returns once every execution has an outcome.
func (w *Worker) shutdown() {
	done := make(chan struct{})
	go func() {
		w.settled.Wait()
		close(done)
	}()
	grace := time.NewTimer(w.cfg.ShutdownGrace)
	defer grace.Stop()
	if n := len(w.inflightSnapshot()); n > 0 {
		w.log.Info("skiplock: shutting down; waiting for running tasks (StopAndCancel, or a second signal to worker.Run, cancels them)",
			"count", n, "grace", w.cfg.ShutdownGrace)
	}
	select {
	case <-done:
		return
	case <-grace.C:
		w.log.Warn("skiplock: shutdown grace period over; cancelling running tasks, which go back to pending", "count", len(w.inflightSnapshot()))
	case <-w.stops.hard:
		w.log.Info("skiplock: stopping and cancelling running tasks, which go back to pending", "count", len(w.inflightSnapshot()))
	}
	running := w.inflightSnapshot()
	for _, e := range running {
		w.cancelExecution(e, errShutdown)
	}
	<-done
}
