package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/control"
	"github.com/skiplock/skiplock/internal/cronspec"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Periodic schedules stored in the database: added, changed, paused and
// removed while workers run, by AddSchedule and the rest, `skiplock
// schedules` and the dashboard. The elected worker's scheduler runs them
// beside its Config.Periodic, picks up a change within a second of its
// commit (a notification; a poll every few seconds if one is missed), and
// enqueues each tick once across the cluster, as it does for the
// configuration's schedules.

// Errors of the stored schedules.
var (
	// ErrScheduleExists is wrapped by AddSchedule's error when a schedule
	// of that name is stored already.
	ErrScheduleExists = errors.New("skiplock: schedule already exists")
	// ErrScheduleNotFound is wrapped by the error of a change to a
	// schedule that is not stored.
	ErrScheduleNotFound = errors.New("skiplock: schedule not found")
)

// Schedule is a periodic schedule stored in the database.
type Schedule struct {
	// Name identifies the schedule, 1 to MaxNameLength bytes. It is also
	// the schedule's ID for its ticks: a Config.Periodic entry with that
	// ID is the same schedule, and the stored one replaces it while it is
	// stored (they share their last tick, so no tick is enqueued twice).
	Name string
	// Cron is a cron expression: five fields, or six with seconds first,
	// or a descriptor such as @hourly; "CRON_TZ=Europe/Paris 0 9 * * *"
	// sets its time zone (UTC by default). Set Cron or Every.
	Cron string
	// Every is a fixed interval, at least 1s and a whole number of
	// milliseconds, aligned to the Unix epoch.
	Every time.Duration
	// Task is the name of the task enqueued at each tick.
	Task string
	// Payload is the task's payload, JSON; nil is JSON null. It is stored
	// as given, in the clear: a worker with a Keyring encrypts the task's
	// copy when it enqueues it.
	Payload json.RawMessage
	// Queue is the task's queue. Defaults to DefaultQueue.
	Queue string
	// Priority is the task's priority (WithPriority). Defaults to 0.
	Priority int
	// MaxAttempts is the task's WithMaxAttempts. Defaults to
	// DefaultMaxAttempts.
	MaxAttempts int
	// Timeout is the task's WithTimeout. Defaults to the worker's.
	Timeout time.Duration
	// CatchUp enqueues, once, the latest of the ticks missed while no
	// worker ran (ticks more than 10s late; every tick less late than
	// that is enqueued in any case); by default missed ticks are skipped.
	// Ticks that pass while the schedule is paused are never enqueued,
	// CatchUp or not.
	CatchUp bool
	// Paused: a paused schedule enqueues nothing; its ticks pass. On
	// AddSchedule, adds it paused; UpdateSchedule keeps the pause as it
	// is (PauseSchedule, ResumeSchedule change it).
	Paused bool

	// Read by Schedules and GetSchedule; ignored by the writes.

	// PausedAt is when the schedule was paused; nil when it is not.
	PausedAt *time.Time
	// CreatedAt and UpdatedAt are when it was added and last changed.
	CreatedAt time.Time
	UpdatedAt time.Time
	// LastTick is the latest tick the scheduler enqueued (or, for a new
	// schedule, the tick it started after); nil before a scheduler saw
	// it.
	LastTick *time.Time
}

// Spec describes when the schedule ticks: its cron expression, or "every
// 5m0s".
func (s Schedule) Spec() string {
	if s.Every != 0 {
		return "every " + s.Every.String()
	}
	return s.Cron
}

// Options returns the options of the tasks the schedule enqueues.
func (s Schedule) Options() []Option {
	opts := []Option{WithPriority(s.Priority)}
	if s.Queue != "" {
		opts = append(opts, WithQueue(s.Queue))
	}
	if s.MaxAttempts != 0 {
		opts = append(opts, WithMaxAttempts(s.MaxAttempts))
	}
	if s.Timeout != 0 {
		opts = append(opts, WithTimeout(s.Timeout))
	}
	return opts
}

// Validate returns the error, wrapping ErrInvalidRequest and naming what
// is wrong, that AddSchedule and UpdateSchedule would return for s; nil
// when s is valid.
func (s Schedule) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: schedule %q: %s", ErrInvalidRequest, s.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case s.Name == "" || len(s.Name) > MaxNameLength:
		return fmt.Errorf("%w: schedule name must be 1 to %d bytes, got %d", ErrInvalidRequest, MaxNameLength, len(s.Name))
	case strings.TrimSpace(s.Name) != s.Name:
		return bad("name begins or ends with white space")
	case s.Task == "" || len(s.Task) > MaxNameLength:
		return bad("task name must be 1 to %d bytes, got %d", MaxNameLength, len(s.Task))
	case (s.Cron == "") == (s.Every == 0):
		return bad("set exactly one of a cron expression and an interval (every)")
	case s.Every != 0 && s.Every < time.Second:
		return bad("interval must be at least 1s, got %s", s.Every)
	case s.Every%time.Millisecond != 0:
		return bad("interval must be a whole number of milliseconds, got %s", s.Every)
	case s.Payload != nil && !json.Valid(s.Payload):
		return bad("payload is not valid JSON")
	}
	if s.Cron != "" {
		if _, err := cronspec.Parse(s.Cron); err != nil {
			return bad("cron expression %q does not parse: %v", s.Cron, err)
		}
	}
	if _, err := buildOptions(s.Options()); err != nil {
		return bad("%v", strings.TrimPrefix(err.Error(), ErrInvalidTask.Error()+": "))
	}
	return nil
}

// scheduleOptions is a schedule's task options as stored (the options
// column).
type scheduleOptions struct {
	Queue       string `json:"queue,omitempty"`
	Priority    int    `json:"priority,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	TimeoutMs   int64  `json:"timeout_ms,omitempty"`
}

func (s Schedule) request() map[string]any {
	r := map[string]any{"schedule": s.Name, "task": s.Task, "spec": s.Spec()}
	if s.Queue != "" {
		r["queue"] = s.Queue
	}
	return r
}

func (s Schedule) columns() (cron *string, everyMs *int64, payload, options json.RawMessage) {
	if s.Cron != "" {
		cron = &s.Cron
	} else {
		ms := s.Every.Milliseconds()
		everyMs = &ms
	}
	payload = s.Payload
	if payload == nil {
		payload = json.RawMessage("null")
	}
	options, _ = json.Marshal(scheduleOptions{Queue: s.Queue, Priority: s.Priority, MaxAttempts: s.MaxAttempts, TimeoutMs: s.Timeout.Milliseconds()})
	return
}

// AddSchedule stores a new schedule. Running workers pick it up within
// seconds; its first tick is the first to come after the scheduler sees it
// (a new schedule does not enqueue the past). It fails with an error
// wrapping ErrInvalidRequest for an invalid schedule (Validate), and
// ErrScheduleExists for a name already stored. The change and its audit
// record are one transaction.
func (c *Client) AddSchedule(ctx context.Context, s Schedule) error {
	return c.addSchedule(ctx, nil, s)
}

// AddScheduleTx is AddSchedule in the caller's transaction: workers hear of
// the schedule when it commits.
func (c *Client) AddScheduleTx(ctx context.Context, tx Executor, s Schedule) error {
	return c.addSchedule(ctx, pgerr.Interpreting(tx), s)
}

func (c *Client) addSchedule(ctx context.Context, tx pgerr.Executor, s Schedule) error {
	if err := s.Validate(); err != nil {
		return err
	}
	cron, every, payload, options := s.columns()
	return c.changeSchedule(ctx, tx, AuditScheduleAdd, s.request(), "adding", s.Name, func(x pgerr.Executor) (int64, error) {
		n, err := c.queries.ScheduleCreate(ctx, x, db.ScheduleCreateParams{
			Name: s.Name, Cron: cron, EveryMs: every, TaskName: s.Task, Payload: payload, Options: options,
			CatchUp: s.CatchUp, Paused: s.Paused,
		})
		if err == nil && n == 0 {
			err = ErrScheduleExists
		}
		return n, err
	})
}

// UpdateSchedule replaces the stored schedule of s.Name: its spec, task,
// payload and options (not whether it is paused). Running workers pick up
// the change within seconds; the ticks due until then are the schedule's
// as it was, the ones after it the new one's, and a tick enqueued before
// it is not enqueued again. It fails with an error wrapping
// ErrInvalidRequest for an invalid schedule, and ErrScheduleNotFound when
// none of that name is stored.
func (c *Client) UpdateSchedule(ctx context.Context, s Schedule) error {
	return c.updateSchedule(ctx, nil, s)
}

// UpdateScheduleTx is UpdateSchedule in the caller's transaction.
func (c *Client) UpdateScheduleTx(ctx context.Context, tx Executor, s Schedule) error {
	return c.updateSchedule(ctx, pgerr.Interpreting(tx), s)
}

func (c *Client) updateSchedule(ctx context.Context, tx pgerr.Executor, s Schedule) error {
	if err := s.Validate(); err != nil {
		return err
	}
	cron, every, payload, options := s.columns()
	return c.changeSchedule(ctx, tx, AuditScheduleUpdate, s.request(), "updating", s.Name, func(x pgerr.Executor) (int64, error) {
		return c.queries.ScheduleUpdate(ctx, x, db.ScheduleUpdateParams{
			Name: s.Name, Cron: cron, EveryMs: every, TaskName: s.Task, Payload: payload, Options: options, CatchUp: s.CatchUp,
		})
	})
}

// PauseSchedule stops the schedule from enqueuing, from the scheduler's
// next pass (within seconds); its ticks pass unenqueued. Pausing a paused
// schedule changes nothing. It fails with ErrScheduleNotFound when none of
// that name is stored.
func (c *Client) PauseSchedule(ctx context.Context, name string) error {
	return c.pauseSchedule(ctx, nil, name)
}

// PauseScheduleTx is PauseSchedule in the caller's transaction.
func (c *Client) PauseScheduleTx(ctx context.Context, tx Executor, name string) error {
	return c.pauseSchedule(ctx, pgerr.Interpreting(tx), name)
}

func (c *Client) pauseSchedule(ctx context.Context, tx pgerr.Executor, name string) error {
	return c.changeSchedule(ctx, tx, AuditSchedulePause, map[string]any{"schedule": name}, "pausing", name, func(x pgerr.Executor) (int64, error) {
		return c.queries.SchedulePause(ctx, x, name)
	})
}

// ResumeSchedule lets a paused schedule enqueue again, from its next tick:
// ticks that passed while it was paused are not enqueued, CatchUp or not.
// It fails with ErrScheduleNotFound when none of that name is stored.
func (c *Client) ResumeSchedule(ctx context.Context, name string) error {
	return c.resumeSchedule(ctx, nil, name)
}

// ResumeScheduleTx is ResumeSchedule in the caller's transaction.
func (c *Client) ResumeScheduleTx(ctx context.Context, tx Executor, name string) error {
	return c.resumeSchedule(ctx, pgerr.Interpreting(tx), name)
}

func (c *Client) resumeSchedule(ctx context.Context, tx pgerr.Executor, name string) error {
	return c.changeSchedule(ctx, tx, AuditScheduleResume, map[string]any{"schedule": name}, "resuming", name, func(x pgerr.Executor) (int64, error) {
		return c.queries.ScheduleResume(ctx, x, name)
	})
}

// RemoveSchedule deletes the stored schedule: it enqueues nothing more
// (tasks it enqueued stay). A Config.Periodic entry of the same ID runs
// again. It fails with ErrScheduleNotFound when none of that name is
// stored.
func (c *Client) RemoveSchedule(ctx context.Context, name string) error {
	return c.removeSchedule(ctx, nil, name)
}

// RemoveScheduleTx is RemoveSchedule in the caller's transaction.
func (c *Client) RemoveScheduleTx(ctx context.Context, tx Executor, name string) error {
	return c.removeSchedule(ctx, pgerr.Interpreting(tx), name)
}

func (c *Client) removeSchedule(ctx context.Context, tx pgerr.Executor, name string) error {
	return c.changeSchedule(ctx, tx, AuditScheduleRemove, map[string]any{"schedule": name}, "removing", name, func(x pgerr.Executor) (int64, error) {
		return c.queries.ScheduleDelete(ctx, x, name)
	})
}

// changeSchedule makes one change of a stored schedule with its audit
// record, and tells the workers, in one transaction: tx, or one of its own
// when tx is nil. change returns how
// many schedules it changed: none is ErrScheduleNotFound.
func (c *Client) changeSchedule(ctx context.Context, tx pgerr.Executor, action AuditAction, req map[string]any, verb, name string,
	change func(x pgerr.Executor) (int64, error)) error {
	fail := func(err error) error { return fmt.Errorf("%s schedule %q: %w", verb, name, err) }
	if name == "" {
		return fail(fmt.Errorf("%w: schedule name is empty", ErrInvalidRequest))
	}
	a, err := c.newAudit(ctx, tx, action, req)
	if err != nil {
		return fail(err)
	}
	_, ctl, err := c.channels(ctx)
	if err != nil {
		return fail(err)
	}
	err = a.once(ctx, func(x pgerr.Executor) (int64, error) {
		n, err := change(x)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, ErrScheduleNotFound
		}
		return n, c.queries.QueueNotify(ctx, x, db.QueueNotifyParams{Channel: ctl, Queues: []string{control.Schedules}})
	})
	if err != nil {
		return fail(err)
	}
	return nil
}

// Schedules lists the stored schedules by name.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	rows, err := c.queries.ScheduleList(ctx, c.exec)
	if err != nil {
		return nil, fmt.Errorf("listing schedules: %w", err)
	}
	out := make([]Schedule, 0, len(rows))
	for _, r := range rows {
		s, err := scheduleFrom(db.ScheduleGetRow(r))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// GetSchedule returns the stored schedule of that name, or an error
// wrapping ErrScheduleNotFound.
func (c *Client) GetSchedule(ctx context.Context, name string) (Schedule, error) {
	r, err := c.queries.ScheduleGet(ctx, c.exec, name)
	if errors.Is(err, pgerr.ErrNotFound) {
		return Schedule{}, fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
	}
	if err != nil {
		return Schedule{}, fmt.Errorf("reading schedule %q: %w", name, err)
	}
	return scheduleFrom(r)
}

func scheduleFrom(r db.ScheduleGetRow) (Schedule, error) {
	var o scheduleOptions
	if err := json.Unmarshal(r.Options, &o); err != nil {
		return Schedule{}, fmt.Errorf("reading schedule %q: options: %w", r.Name, err)
	}
	s := Schedule{
		Name: r.Name, Cron: deref(r.Cron), Task: r.TaskName, Payload: r.Payload,
		Queue: o.Queue, Priority: o.Priority, MaxAttempts: o.MaxAttempts, Timeout: time.Duration(o.TimeoutMs) * time.Millisecond,
		CatchUp: r.CatchUp, Paused: r.PausedAt != nil, PausedAt: r.PausedAt,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, LastTick: r.LastTick,
	}
	if r.EveryMs != nil {
		s.Every = time.Duration(*r.EveryMs) * time.Millisecond
	}
	return s, nil
}
