package observe

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/skiplock/skiplock/worker"
)

// LogOptions tunes Logging. The zero value logs one line per attempt at
// debug level, without payloads.
type LogOptions struct {
	// Level is the level of the line logged for each attempt. Defaults to
	// slog.LevelDebug, so that a logger at info logs nothing per task.
	Level slog.Leveler
	// FailureLevel, if set, is the level of the lines of failed attempts
	// (errors, panics, timeouts; not snoozes or shutdowns), for example
	// slog.LevelWarn to see failures at info without every success.
	FailureLevel slog.Leveler
	// Payload adds each task's payload and metadata to its line. Off by
	// default: payloads hold whatever applications put in them, personal
	// data and credentials included.
	Payload bool
	// MaxErrorLength cuts the error text in a line to this many bytes.
	// Defaults to DefaultMaxErrorLength; negative leaves errors out.
	MaxErrorLength int
}

// DefaultMaxErrorLength is LogOptions.MaxErrorLength's default.
const DefaultMaxErrorLength = 500

// Logging returns a Middleware that logs one line per attempt to logger
// (slog.Default() when nil): task_id, name, queue, attempt, outcome
// ("success", or the worker.Outcome), duration, and the error of a failed
// attempt. At the default level and a logger at info it logs nothing, and
// costs one Enabled check per attempt.
//
// Attempts that never reach a handler (no handler for the name, or
// abandoned after ignoring their context) are logged by the worker itself.
func Logging(logger *slog.Logger, opts LogOptions) worker.Middleware {
	if logger == nil {
		logger = slog.Default()
	}
	level := slog.LevelDebug
	if opts.Level != nil {
		level = opts.Level.Level()
	}
	failLevel := level
	if opts.FailureLevel != nil {
		failLevel = opts.FailureLevel.Level()
	}
	maxErr := opts.MaxErrorLength
	if maxErr == 0 {
		maxErr = DefaultMaxErrorLength
	}
	return func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, t *worker.Task) error {
			if !logger.Enabled(ctx, level) && !logger.Enabled(ctx, failLevel) {
				return next(ctx, t)
			}
			start := time.Now()
			return call(ctx, next, t, func(err error, panicked bool, value any) {
				outcome := outcomeOf(ctx, err, panicked)
				lvl := level
				if failed(outcome) {
					lvl = failLevel
				}
				if !logger.Enabled(ctx, lvl) {
					return
				}
				attrs := []slog.Attr{
					slog.Int64("task_id", t.ID),
					slog.String("name", t.Name),
					slog.String("queue", t.Queue),
					slog.Int("attempt", t.Attempt),
					slog.String("outcome", outcomeLabel(outcome)),
					slog.Duration("duration", time.Since(start)),
				}
				msg := err
				if panicked {
					msg = fmt.Errorf("panic: %v", value)
				}
				if msg != nil && maxErr > 0 && outcome != worker.OutcomeSnoozed {
					attrs = append(attrs, slog.String("error", clip(msg.Error(), maxErr)))
				}
				if opts.Payload {
					attrs = append(attrs, slog.String("payload", string(t.Payload)), slog.String("metadata", string(t.Metadata)))
				}
				logger.LogAttrs(ctx, lvl, "skiplock: task attempt", attrs...)
			})
		}
	}
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && s[i]&0xc0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}
