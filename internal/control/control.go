// Package control is the format of the commands a producer sends to the
// workers on the schema's control channel (internal/schema.Channels): the queue
// package writes them, the worker package reads them.
package control

import (
	"strconv"
	"strings"
)

const cancelPrefix = "cancel:"

// Schedules is the command telling the workers that the stored periodic
// schedules changed: the elected scheduler reloads them.
const Schedules = "schedules"

// Suspects is the notice, sent by a rescue that returned suspects to the
// queue (tasks that were running when a worker process died), that wakes
// the workers' look for a suspect to run alone.
const Suspects = "suspects"

// Cancel is the command asking the worker running task id to cancel it.
func Cancel(id int64) string { return cancelPrefix + strconv.FormatInt(id, 10) }

// ParseCancel returns the task id of a Cancel command, and false for
// anything else.
func ParseCancel(msg string) (int64, bool) {
	rest, ok := strings.CutPrefix(msg, cancelPrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	return id, err == nil
}
