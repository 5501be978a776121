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

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// schedule is a parsed PeriodicTask.
type schedule struct {
	PeriodicTask
	cron cron.Schedule
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
			spec := p.Cron
			if !strings.HasPrefix(spec, "CRON_TZ=") && !strings.HasPrefix(spec, "TZ=") {
				// The parser's default is the machine's zone; processes in
				// different zones would disagree on ticks.
				spec = "CRON_TZ=UTC " + spec
			}
			c, err := cronParser.Parse(spec)
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
type scheduler struct {
	schedules []schedule
	lead      func(ctx context.Context) bool // the scheduler's election (elector.lead)
	pool      *pgxpool.Pool
	queries   *db.Queries
	producer  *queue.Client
	now       func() time.Time
	every     time.Duration
	log       *slog.Logger
	passed    func() // after each pass it leads, if set (a test signal)
}

func (w *Worker) scheduler() *scheduler {
	return &scheduler{
		schedules: w.schedules, lead: newElector(schedulerJob, w.guard, w.log, w.cfg.WorkerID).lead,
		pool: w.pool, queries: w.queries, producer: w.producer, now: w.now,
		every: min(time.Second, w.cfg.PollInterval), log: w.log,
	}
}

func (s *scheduler) run(ctx context.Context) {
	if len(s.schedules) == 0 {
		return
	}
	every(ctx, s.every, s.pass)
}

// pass enqueues the ticks that came due, if this worker leads.
func (s *scheduler) pass(ctx context.Context) {
	if !s.lead(ctx) {
		return
	}
	for _, sc := range s.schedules {
		if err := s.scheduleOne(ctx, sc); err != nil && ctx.Err() == nil {
			s.log.Warn("skiplock: enqueueing a periodic task", "schedule", sc.ID, "error", err)
		}
	}
	if s.passed != nil {
		s.passed()
	}
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
		late := now.Sub(tick) > onTimeWithin
		if count > 1 || late {
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
