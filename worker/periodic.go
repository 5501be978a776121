package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/cronspec"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/queue"
)

// onTimeWithin is how late a tick may be enqueued and still count as on
// time rather than missed: it covers a scheduler handover and a slow pass.
const onTimeWithin = 10 * time.Second

// MissedTicks says what happens to ticks that passed while no worker ran.
type MissedTicks int

const (
	// SkipMissed drops ticks more than 10s late: after an outage the
	// schedule resumes with its next tick.
	SkipMissed MissedTicks = iota
	// CatchUpOnce enqueues the most recent missed tick once, and drops the
	// older ones.
	CatchUpOnce
)

// PeriodicTask enqueues a task on a schedule. Whatever the number of
// worker processes, each tick is enqueued once: one elected worker
// schedules, and every tick carries a unique key (the schedule's ID and the
// tick's time) that a unique index enforces, so that even two schedulers,
// with clocks that differ, cannot enqueue a tick twice.
type PeriodicTask struct {
	// ID names the schedule; keep it stable across deploys. Defaults to the
	// task name and the schedule.
	ID string
	// Cron is a cron expression: five fields, or six with seconds first,
	// or a descriptor such as @hourly; "CRON_TZ=Europe/Paris 0 9 * * *"
	// sets its time zone (UTC by default). Set Cron or Every.
	Cron string
	// Every is a fixed interval, at least 1s, aligned to the Unix epoch so
	// that every process computes the same ticks.
	Every time.Duration
	// Name, Payload and Options make the task, as for queue.Client.Enqueue.
	// Its run time is the tick. A Payload that is a typed task
	// (queue.TaskArgs) may leave Name empty: its TaskName is the name, and
	// its TaskOptions, if it has them, apply before Options.
	Name    string
	Payload any
	Options []queue.Option
	// Missed is the policy for ticks missed while no worker ran. Defaults
	// to SkipMissed.
	Missed MissedTicks
}

// schedule is a parsed PeriodicTask.
type schedule struct {
	PeriodicTask
	cron cron.Schedule
	// A stored schedule's pause, and when it was last changed.
	paused    bool
	changedAt time.Time
}

func parseSchedules(tasks []PeriodicTask) ([]schedule, error) {
	var out []schedule
	ids := map[string]bool{}
	for i, p := range tasks {
		if args, ok := p.Payload.(queue.TaskArgs); ok && p.Name == "" {
			t := queue.NewTaskFrom(args, p.Options...)
			p.Name, p.Options = t.Name, t.Options
		}
		s := schedule{PeriodicTask: p}
		switch {
		case p.Name == "":
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d]: Name is empty", i)
		case (p.Cron == "") == (p.Every == 0):
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d] (%s): set exactly one of Cron and Every", i, p.Name)
		case p.Every != 0 && p.Every < time.Second:
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d] (%s): Every must be at least 1s, got %s", i, p.Name, p.Every)
		case strings.HasPrefix(strings.TrimSpace(p.Cron), "@every"):
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d] (%s): use Every, not %q: @every counts from each process's start, so processes would disagree on ticks", i, p.Name, p.Cron)
		}
		if p.Cron != "" {
			c, err := cronspec.Parse(p.Cron)
			if err != nil {
				return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d] (%s): cron %q: %w", i, p.Name, p.Cron, err)
			}
			s.cron = c
		}
		if s.ID == "" {
			s.ID = p.Name + " " + p.Cron
			if p.Every != 0 {
				s.ID = p.Name + " every " + p.Every.String()
			}
		}
		if ids[s.ID] {
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d]: schedule ID %q used twice", i, s.ID)
		}
		ids[s.ID] = true
		if _, err := schema.EncodePayload(p.Payload); err != nil {
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d] (%s): %w", i, p.Name, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// latestTick returns the last tick at or before now, and whether one came
// after `after`. It also reports how many ticks fell in (after, now],
// capped, for the log.
func (s schedule) latestTick(after, now time.Time) (tick time.Time, count int) {
	if s.Every != 0 {
		d := s.Every.Nanoseconds()
		latest := time.Unix(0, now.UnixNano()/d*d).UTC()
		if !latest.After(after) {
			return time.Time{}, 0
		}
		n := (latest.UnixNano() - after.UnixNano() + d - 1) / d
		return latest, int(min(n, math.MaxInt32))
	}
	// A cron schedule has no inverse: walk forward from after, starting
	// no more than a day back so that a long outage costs little.
	from := after
	if now.Sub(from) > 24*time.Hour {
		from = now.Add(-24 * time.Hour)
		count = 1 // at least the ticks before the window we walk
	}
	for t := s.cron.Next(from); !t.After(now); t = s.cron.Next(t) {
		tick = t
		count++
	}
	if tick.IsZero() {
		return time.Time{}, 0
	}
	return tick, count
}

// scheduler is the elected periodic scheduler: each pass (every second, or
// PollInterval if shorter) enqueues the ticks that came due, while lead
// says this worker leads. Two schedulers that both believe they lead (a
// handover, clocks apart) still enqueue each tick once: the tick's unique
// key decides.
//
// Its schedules are Config.Periodic's and the ones stored in
// skiplock_schedules (queue.Client.AddSchedule), which it loads when it
// becomes the leader, when a change is announced on the control channel,
// and every reloadEvery in case an announcement was missed. A stored
// schedule replaces a configured one of the same ID. A worker with no
// schedule at all tries for the leadership only every reloadEvery, or on
// an announcement.
type scheduler struct {
	config      []schedule // Config.Periodic
	stored      []schedule // the stored schedules, while this worker leads
	loaded      time.Time  // when stored was loaded; zero: not loaded
	lastTry     time.Time  // the last pass that asked for the leadership
	load        func(ctx context.Context) ([]queue.Schedule, error)
	changed     <-chan struct{} // a change of the stored schedules was announced
	reloadEvery time.Duration
	warned      map[string]string              // what was last logged about a schedule, to log it once
	lead        func(ctx context.Context) bool // the scheduler's election (elector.lead)
	pool        *pgxpool.Pool
	queries     *db.Queries
	producer    *queue.Client
	now         func() time.Time
	every       time.Duration
	log         *slog.Logger
	passed      func() // after each pass it leads, if set (a test signal)
}

// defaultScheduleReload is how often the elected scheduler reloads the
// stored schedules when no change was announced.
const defaultScheduleReload = 5 * time.Second

func (w *Worker) scheduler() *scheduler {
	reload := w.cfg.scheduleReload
	if reload <= 0 {
		reload = defaultScheduleReload
	}
	return &scheduler{
		config: w.schedules, lead: newElector(schedulerJob, w.guard, w.log, w.cfg.WorkerID).lead,
		load: w.producer.Schedules, changed: w.schedulesChanged, reloadEvery: reload, warned: map[string]string{},
		pool: w.pool, queries: w.queries, producer: w.producer, now: w.now,
		every: min(time.Second, w.cfg.PollInterval), log: w.log,
	}
}

func (s *scheduler) run(ctx context.Context) {
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for {
		announced := false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.changed:
			announced = true
		}
		s.pass(ctx, announced)
	}
}

// pass enqueues the ticks that came due, if this worker leads. announced:
// a change of the stored schedules was announced.
func (s *scheduler) pass(ctx context.Context, announced bool) {
	if len(s.config) == 0 && len(s.stored) == 0 && !announced && time.Since(s.lastTry) < s.reloadEvery {
		return
	}
	s.lastTry = time.Now()
	if !s.lead(ctx) {
		s.stored, s.loaded = nil, time.Time{}
		return
	}
	if announced || s.loaded.IsZero() || time.Since(s.loaded) >= s.reloadEvery {
		s.reload(ctx)
	}
	for _, sc := range s.schedules() {
		if err := s.scheduleOne(ctx, sc); err != nil && ctx.Err() == nil {
			s.log.Warn("skiplock: enqueueing a periodic task", "schedule", sc.ID, "error", err)
		}
	}
	if s.passed != nil {
		s.passed()
	}
}

// reload loads the stored schedules; on failure it keeps the last ones.
func (s *scheduler) reload(ctx context.Context) {
	if s.load == nil {
		return // only Config.Periodic (a test's scheduler)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := s.load(lctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("skiplock: loading the stored periodic schedules", "error", err)
		}
		return
	}
	stored := make([]schedule, 0, len(rows))
	for _, r := range rows {
		sc, err := storedSchedule(r)
		if err != nil {
			s.once(r.Name, "skiplock: stored periodic schedule skipped", "error", err)
			continue
		}
		s.once(r.Name, "")
		stored = append(stored, sc)
	}
	s.stored, s.loaded = stored, time.Now()
}

// once logs msg about a schedule unless it was the last thing logged about
// it; "" forgets.
func (s *scheduler) once(name, msg string, args ...any) {
	key := msg + fmt.Sprint(args...)
	if msg == "" {
		delete(s.warned, name)
		return
	}
	if s.warned[name] == key {
		return
	}
	if s.warned == nil {
		s.warned = map[string]string{}
	}
	s.warned[name] = key
	s.log.Warn(msg, append([]any{"schedule", name}, args...)...)
}

// schedules merges the configured schedules with the stored ones: a stored
// schedule replaces a configured one of the same ID.
func (s *scheduler) schedules() []schedule {
	if len(s.stored) == 0 {
		return s.config
	}
	names := make(map[string]bool, len(s.stored))
	for _, sc := range s.stored {
		names[sc.ID] = true
	}
	out := append([]schedule{}, s.stored...)
	for _, sc := range s.config {
		if names[sc.ID] {
			s.once("config:"+sc.ID, "skiplock: a stored schedule replaces Config.Periodic's schedule of the same ID while it is stored")
			continue
		}
		s.once("config:"+sc.ID, "")
		out = append(out, sc)
	}
	return out
}

// storedSchedule is a stored schedule as the scheduler runs it: its name
// is its ID.
func storedSchedule(r queue.Schedule) (schedule, error) {
	missed := SkipMissed
	if r.CatchUp {
		missed = CatchUpOnce
	}
	sc := schedule{
		PeriodicTask: PeriodicTask{
			ID: r.Name, Cron: r.Cron, Every: r.Every, Name: r.Task, Payload: r.Payload, Options: r.Options(), Missed: missed,
		},
		paused: r.Paused, changedAt: r.UpdatedAt,
	}
	if r.Payload == nil {
		sc.Payload = nil
	}
	if err := r.Validate(); err != nil {
		return sc, err
	}
	if r.Cron != "" {
		c, err := cronspec.Parse(r.Cron)
		if err != nil {
			return sc, err
		}
		sc.cron = c
	}
	return sc, nil
}

// scheduleOne enqueues the due tick of one schedule, if any, and records it
// as the schedule's last, in one transaction.
func (sc *scheduler) scheduleOne(ctx context.Context, s schedule) error {
	now := sc.now()
	return pgx.BeginFunc(ctx, sc.pool, func(tx pgx.Tx) error {
		last, err := sc.queries.PeriodicLastTick(ctx, pgerr.Interpreting(tx), s.ID)
		if errors.Is(err, pgerr.ErrNotFound) {
			// A new schedule starts with its next tick, not with the past.
			first, _ := s.latestTick(time.Unix(0, 0), now)
			if first.IsZero() {
				first = now
			}
			return sc.queries.PeriodicSetLastTick(ctx, tx, db.PeriodicSetLastTickParams{Schedule: s.ID, LastTick: first})
		}
		if err != nil {
			return err
		}
		tick, count := s.latestTick(last, now)
		if tick.IsZero() {
			return nil
		}
		if s.paused {
			// A paused schedule's ticks pass unenqueued.
			return sc.queries.PeriodicSetLastTick(ctx, tx, db.PeriodicSetLastTickParams{Schedule: s.ID, LastTick: tick})
		}
		late := now.Sub(tick) > onTimeWithin
		// A schedule changed since its last tick (a shorter interval, say)
		// has ticks since then that it did not miss.
		changed := s.changedAt.After(last)
		if (count > 1 && !changed) || late {
			sc.log.Warn("skiplock: periodic schedule missed ticks while no worker ran", "schedule", s.ID,
				"missed", count-1+map[bool]int{true: 1, false: 0}[late], "policy", map[MissedTicks]string{SkipMissed: "skip", CatchUpOnce: "catch up once"}[s.Missed])
		}
		if !late || s.Missed == CatchUpOnce {
			opts := append(append([]queue.Option{}, s.Options...),
				queue.WithRunAt(tick),
				// Unique forever (one window that never ends): the key names
				// the schedule and the tick.
				queue.WithUniqueKey("periodic:"+s.ID+":"+strconv.FormatInt(tick.UnixNano(), 10)),
				queue.WithUniqueWindow(time.Duration(math.MaxInt64)))
			if _, err := sc.producer.EnqueueTx(ctx, tx, s.Name, s.Payload, opts...); err != nil && !errors.Is(err, queue.ErrDuplicate) {
				return err
			}
		}
		return sc.queries.PeriodicSetLastTick(ctx, tx, db.PeriodicSetLastTickParams{Schedule: s.ID, LastTick: tick})
	})
}
