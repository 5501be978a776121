package worker

import (
	"strings"
	"time"
)

// SetClock replaces the periodic scheduler's clock, for tests.
func SetClock(cfg *Config, now func() time.Time) { cfg.now = now }

// SetRescuePassed makes the worker call passed after each pass it makes
// as the elected rescuer.
func SetRescuePassed(cfg *Config, passed func()) { cfg.rescuePassed = passed }

// ForceCursor makes the next claims of queueName start at the cursor, as
// if a claim from the head had just been expensive, until the next claim
// from the head (headEvery from now): every cursor of the queue that its
// claims have made so far.
func ForceCursor(w *Worker, queueName string) {
	w.cursors.mu.Lock()
	defer w.cursors.mu.Unlock()
	for key, c := range w.cursors.m {
		if !strings.HasPrefix(key, queueName+"\x00") {
			continue
		}
		c.mu.Lock()
		c.costly, c.lastHead, c.headCost = true, time.Now(), 0
		c.mu.Unlock()
	}
}

// SetHandoffWait sets how long the outcome of a task that held a place
// waits for a claim to carry it before the completer writes it.
func SetHandoffWait(cfg *Config, d time.Duration) { cfg.handoffWait = d }

// SetScheduleReload sets how often the elected scheduler reloads the
// stored schedules when no change is announced.
func SetScheduleReload(cfg *Config, d time.Duration) { cfg.scheduleReload = d }

// QueueClaimed reports how many tasks the worker took with the claims of
// queue limits (TaskClaimQueue), how many of those within a held block
// (TaskClaimHeld), and how many with the claim of every limit (TaskClaim).
func QueueClaimed(w *Worker) (queue, held, limited int64) {
	w.heldClaims.mu.Lock()
	defer w.heldClaims.mu.Unlock()
	t := w.heldClaims.taken
	return t[howQueue] + t[howHeld], t[howHeld], t[howLimited]
}

// SetTickWindow sets how late a periodic tick may be and still be
// enqueued.
func SetTickWindow(cfg *Config, d time.Duration) { cfg.tickWindow = d }

// CursorCarried reports whether a cursor of queueName was carried past rows
// of names the worker does not handle, and is still there.
func CursorCarried(w *Worker, queueName string) bool {
	w.cursors.mu.Lock()
	defer w.cursors.mu.Unlock()
	for key, c := range w.cursors.m {
		if !strings.HasPrefix(key, queueName+"\x00") {
			continue
		}
		c.mu.Lock()
		carried := c.valid && c.exact
		c.mu.Unlock()
		if carried {
			return true
		}
	}
	return false
}
