package worker

import (
	"sync"
	"time"
)

// deadlines expires the contexts of executions whose timeout is the
// worker's TaskTimeout, with one timer for all of them rather than one per
// task. They share the timeout, so their deadlines come in the order they
// were made: the list is kept in that order by appending (a deadline made a
// moment earlier on another goroutine steps back past the few later ones),
// an execution leaves it in constant time when it settles, and the timer
// is armed for the first. A timer that fires for an execution already gone
// arms itself again for the new first one. An execution with a timeout of
// its own has a timer of its own (execution.deadline).
type deadlines struct {
	mu         sync.Mutex
	head, tail *execution
	timer      *time.Timer
	armed      time.Time // when timer fires; zero while it is stopped
}

// add lists e, whose context has a deadline.
func (d *deadlines) add(e *execution) {
	at := e.own.ctx.deadline
	d.mu.Lock()
	defer d.mu.Unlock()
	prev := d.tail
	for prev != nil && prev.own.ctx.deadline.After(at) {
		prev = prev.dlPrev
	}
	e.dlPrev = prev
	if prev == nil {
		e.dlNext, d.head = d.head, e
	} else {
		e.dlNext, prev.dlNext = prev.dlNext, e
	}
	if e.dlNext == nil {
		d.tail = e
	} else {
		e.dlNext.dlPrev = e
	}
	e.listed = true
	if d.armed.IsZero() || at.Before(d.armed) {
		d.arm(at)
	}
}

// remove unlists e, if it still is.
func (d *deadlines) remove(e *execution) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unlink(e)
}

func (d *deadlines) unlink(e *execution) {
	if !e.listed {
		return
	}
	if e.dlPrev == nil {
		d.head = e.dlNext
	} else {
		e.dlPrev.dlNext = e.dlNext
	}
	if e.dlNext == nil {
		d.tail = e.dlPrev
	} else {
		e.dlNext.dlPrev = e.dlPrev
	}
	e.dlPrev, e.dlNext, e.listed = nil, nil, false
}

// arm has the timer fire at at; d.mu is held.
func (d *deadlines) arm(at time.Time) {
	d.armed = at
	wait := time.Until(at)
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, d.fire)
		return
	}
	d.timer.Reset(wait)
}

// fire expires the executions whose deadline has come, and arms the timer
// for the next one.
func (d *deadlines) fire() {
	var due []*execution
	d.mu.Lock()
	now := time.Now()
	for e := d.head; e != nil && !e.own.ctx.deadline.After(now); e = d.head {
		d.unlink(e)
		due = append(due, e)
	}
	d.armed = time.Time{}
	if d.head != nil {
		d.arm(d.head.own.ctx.deadline)
	}
	d.mu.Unlock()
	for _, e := range due {
		e.own.ctx.expire()
	}
}
