// Package cronspec parses the cron expressions of periodic schedules, the
// same way for the worker (Config.Periodic, stored schedules) and for the
// queue package (which checks a stored schedule before writing it).
package cronspec

import (
	"errors"
	"strings"

	"github.com/robfig/cron/v3"
)

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ErrEvery refuses @every: it counts from each process's start, so
// processes would disagree on ticks.
var ErrEvery = errors.New("use a fixed interval (Every), not @every: @every counts from each process's start, so processes would disagree on ticks")

// Parse parses spec: five fields, or six with seconds first, or a
// descriptor such as @hourly; "CRON_TZ=Europe/Paris 0 9 * * *" sets its
// time zone, UTC by default (never the machine's, on which processes in
// different zones would disagree).
func Parse(spec string) (cron.Schedule, error) {
	if strings.HasPrefix(strings.TrimSpace(spec), "@every") {
		return nil, ErrEvery
	}
	if !strings.HasPrefix(spec, "CRON_TZ=") && !strings.HasPrefix(spec, "TZ=") {
		spec = "CRON_TZ=UTC " + spec
	}
	return parser.Parse(spec)
}
