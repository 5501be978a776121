package worker

import (
	"cmp"
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
// time rather than missed: every tick at most this late is enqueued, so a
// scheduler handover, a stalled process or a slow pass loses none.
const onTimeWithin = 10 * time.Second

// PeriodicTask enqueues a task on a schedule: a schedule declared in code,
// with queue.Schedule's field names and meanings (a stored schedule of
// the same Name replaces it while stored, paused or not). It is ticked
// while at least one live worker declares it, whatever the other workers
// declare: the workers that declare the same set of schedule names elect
// one scheduler among them, and a worker that declares another set (a
// different binary, a rolling deploy) elects its own. Whatever the number
// of worker processes, each tick is enqueued once: a scheduler enqueues
// the ticks due since the schedule's last tick and moves the last tick on
// in one transaction under its row lock, and every tick carries a unique
// key (the schedule's name and the tick's time) that a unique index
// enforces, so that even two schedulers of one schedule (two sets that
// share it, clocks that differ) cannot enqueue a tick twice.
type PeriodicTask struct {
	// Name names the schedule; keep it stable across deploys. Defaults to
	// the task name and the spec ("report.build every 1h0m0s",
	// "report.build 0 3 * * *").
	Name string
	// Cron is a cron expression: five fields, or six with seconds first,
	// or a descriptor such as @hourly; "CRON_TZ=Europe/Paris 0 9 * * *"
	// sets its time zone (UTC by default). Set Cron or Every.
	Cron string
	// Every is a fixed interval, at least 1s, aligned to the Unix epoch so
	// that every process computes the same ticks.
	Every time.Duration
	// Task, Payload and Options make the task, as the name, payload and
	// options of queue.Client.Enqueue. Its run time is the tick. A Payload
	// that is a typed task (queue.TaskArgs) may leave Task empty: its
	// TaskName is the task name, and its TaskOptions, if it has them,
	// apply before Options.
	Task    string
	Payload any
	Options []queue.Option
	// CatchUp is queue.Schedule's: it enqueues, once, the latest of the
	// ticks missed while no worker ran (ticks more than 10s late; every
	// tick less late than that is enqueued in any case); by default
	// missed ticks are skipped. Either way the scheduler logs how many it
	// missed, once.
	CatchUp bool
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
		if args, ok := p.Payload.(queue.TaskArgs); ok && p.Task == "" {
			t := queue.NewTaskFrom(args, p.Options...)
			p.Task, p.Options = t.Name, t.Options
		}
		s := schedule{PeriodicTask: p}
		switch {
		case p.Task == "":
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d]: Task is empty (and Payload is no queue.TaskArgs to name it)", i)
		case (p.Cron == "") == (p.Every == 0):
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d] (%s): set exactly one of Cron and Every", i, p.Task)
		case p.Every != 0 && p.Every < time.Second:
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d] (%s): Every must be at least 1s, got %s", i, p.Task, p.Every)
		case strings.HasPrefix(strings.TrimSpace(p.Cron), "@every"):
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d] (%s): use Every, not %q: @every counts from each process's start, so processes would disagree on ticks", i, p.Task, p.Cron)
		}
		if p.Cron != "" {
			c, err := cronspec.Parse(p.Cron)
			if err != nil {
				return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d] (%s): cron %q: %w", i, p.Task, p.Cron, err)
			}
			s.cron = c
		}
		if s.Name == "" {
			s.Name = p.Task + " " + p.Cron
			if p.Every != 0 {
				s.Name = p.Task + " every " + p.Every.String()
			}
		}
		if ids[s.Name] {
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d]: schedule name %q used twice", i, s.Name)
		}
		ids[s.Name] = true
		if _, err := schema.EncodePayload(p.Payload); err != nil {
			return nil, fmt.Errorf("skiplock: worker.Config.Periodic[%d] (%s): %w", i, p.Task, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// latestTick returns the latest tick in (after, now], zero if none (for
// a cron schedule, in the last day of the span at most).
func (s schedule) latestTick(after, now time.Time) (tick time.Time) {
	if s.Every != 0 {
		d := s.Every.Nanoseconds()
		latest := time.Unix(0, now.UnixNano()/d*d).UTC()
		if !latest.After(after) {
			return time.Time{}
		}
		return latest
	}
	// A cron schedule has no inverse: walk forward from after, starting
	// no more than a day back so that a long outage costs little.
	for t := s.cron.Next(later(after, now.Add(-24*time.Hour))); !t.After(now); t = s.cron.Next(t) {
		tick = t
	}
	return tick
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// dueTicks are the ticks of a schedule that came due since its last tick.
type dueTicks struct {
	onTime     []time.Time // at most the window late, oldest first: each is enqueued
	missed     int         // ticks later than the window (for a cron schedule, of its last day at most)
	lastMissed time.Time   // the latest of those
	latest     time.Time   // the latest tick of all: the schedule's last tick once they are handled
}

func (d *dueTicks) add(t, edge time.Time) {
	if t.Before(edge) {
		d.missed++
		d.lastMissed = t
	} else {
		d.onTime = append(d.onTime, t)
	}
	d.latest = t
}

// due returns the ticks of s in (last, now]; a tick earlier than now -
// window is missed. A stored schedule changed since its last tick ticks as
// it is now from the change on: its ticks up to the change were the
// schedule's as it was, which the scheduler enqueued (or, paused, passed)
// before it loaded the change.
func (s schedule) due(last, now time.Time, window time.Duration) dueTicks {
	var d dueTicks
	edge := now.Add(-window)
	from := last
	if s.changedAt.After(last) {
		from = s.changedAt
		if from.After(now) {
			from = now // the database's clock is ahead of this one
		}
	}
	if s.Every != 0 {
		// Arithmetic, not a walk: a long outage costs nothing.
		e := s.Every.Nanoseconds()
		first := (from.UnixNano()/e + 1) * e // the first tick after from
		latest := now.UnixNano() / e * e
		if latest < first {
			return d
		}
		onTime := max(first, (edge.UnixNano()+e-1)/e*e) // the first tick at or after edge
		if onTime > first {
			n := (min(onTime, latest+e) - first) / e
			d.missed += int(min(n, math.MaxInt32))
			d.lastMissed = time.Unix(0, first+(n-1)*e).UTC()
			d.latest = d.lastMissed
		}
		for t := onTime; t <= latest; t += e {
			d.add(time.Unix(0, t).UTC(), edge)
		}
		return d
	}
	// A cron schedule: walk forward, no more than a day back.
	for t := s.cron.Next(later(from, now.Add(-24*time.Hour))); !t.After(now); t = s.cron.Next(t) {
		d.add(t, edge)
	}
	return d
}

// scheduler is the worker's periodic scheduler, under two elections: the
// stored schedules' (schedulerJob, one leader among all the workers of the
// schema, whatever they declare) and, for a worker with Config.Periodic,
// its declared schedules' (declaredJob: one leader among the workers that
// declare the same set of names). Each pass (every second, or
// PollInterval if shorter) enqueues the ticks that came due of the
// schedules this worker leads. Two schedulers that tick the same schedule
// (a handover, clocks apart, two sets that share a name) still enqueue
// each tick once: the last tick's row lock serializes them, and the
// tick's unique key decides.
//
// The stored schedules (skiplock_schedules, queue.Client.AddSchedule) are
// loaded while the worker leads either election: when it begins to, when
// a change is announced on the control channel, and every reloadEvery in
// case an announcement was missed. A stored schedule replaces a
// configured one of the same name, paused or not: the declared set's
// leader skips it, the stored schedules' leader ticks (or passes) it. A
// worker tries for the stored schedules' election every pass while it
// leads it with schedules to tick, and otherwise only every reloadEvery or
// on an announcement: a worker with no declared schedule asks for no
// other election.
type scheduler struct {
	config      []schedule // Config.Periodic
	stored      []schedule // the stored schedules, while this worker leads either election
	loaded      time.Time  // when stored was loaded; zero: not loaded
	lastTry     time.Time  // the last pass that asked for the stored schedules' election
	leadsStored bool       // what that pass found
	load        func(ctx context.Context) ([]queue.Schedule, error)
	changed     <-chan struct{} // a change of the stored schedules was announced
	reloadEvery time.Duration
	warned      map[string]string              // what was last logged about a schedule, to log it once
	lead        func(ctx context.Context) bool // the stored schedules' election (schedulerJob's elector.lead); nil: none (a test's scheduler)
	// leadDeclared is the declared schedules' election (declaredJob's
	// elector.lead); nil: config's schedules are not ticked.
	leadDeclared func(ctx context.Context) bool
	pool         *pgxpool.Pool
	queries      *db.Queries
	producer     *queue.Client
	now          func() time.Time
	every        time.Duration
	window       time.Duration // how late a tick may be and still be enqueued
	log          *slog.Logger
	passed       func() // after each pass it leads, if set (a test signal)
}

// defaultScheduleReload is how often the elected scheduler reloads the
// stored schedules when no change was announced.
const defaultScheduleReload = 5 * time.Second

func (w *Worker) scheduler() *scheduler {
	reload := w.cfg.scheduleReload
	if reload <= 0 {
		reload = defaultScheduleReload
	}
	s := &scheduler{
		config: w.schedules, lead: newElector(schedulerJob, w.guard, w.log, w.cfg.WorkerID).lead,
		load: w.producer.Schedules, changed: w.schedulesChanged, reloadEvery: reload, warned: map[string]string{},
		pool: w.pool, queries: w.queries, producer: w.producer, now: w.now,
		every: min(time.Second, w.cfg.PollInterval), window: cmp.Or(w.cfg.tickWindow, onTimeWithin), log: w.log,
	}
	if len(w.schedules) > 0 {
		s.leadDeclared = newElector(w.declared, w.guard, w.log, w.cfg.WorkerID).lead
	}
	return s
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

// pass enqueues the ticks that came due of the schedules this worker
// leads. announced: a change of the stored schedules was announced.
func (s *scheduler) pass(ctx context.Context, announced bool) {
	declared := s.leadDeclared != nil && len(s.config) > 0 && s.leadDeclared(ctx)
	if s.lead != nil && (s.leadsStored && len(s.stored) > 0 || announced || time.Since(s.lastTry) >= s.reloadEvery) {
		s.lastTry = time.Now()
		was := s.leadsStored
		s.leadsStored = s.lead(ctx)
		if s.leadsStored && !was {
			// A new leader of the stored schedules loads them afresh: the
			// ones it read to lead its declared set only are no ticks of
			// its own to finish.
			s.loaded = time.Time{}
		}
	}
	if !declared && !s.leadsStored {
		s.stored, s.loaded = nil, time.Time{}
		return
	}
	if announced || s.loaded.IsZero() || time.Since(s.loaded) >= s.reloadEvery {
		if !s.loaded.IsZero() {
			// The ticks due until a change is loaded are the schedules'
			// as they were: enqueue them (or pass a paused one's) first;
			// a changed schedule then ticks from its change on (due).
			s.scheduleAll(ctx, declared)
		}
		s.reload(ctx)
	}
	s.scheduleAll(ctx, declared)
	if s.passed != nil {
		s.passed()
	}
}

// scheduleAll enqueues the due ticks of the schedules this worker leads:
// the stored ones if it leads their election, the declared ones if
// declared.
func (s *scheduler) scheduleAll(ctx context.Context, declared bool) {
	for _, sc := range s.schedules(s.leadsStored, declared) {
		if err := s.scheduleOne(ctx, sc); err != nil && ctx.Err() == nil {
			s.log.Warn("skiplock: enqueueing a periodic task", "schedule", sc.Name, "error", err)
		}
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

// schedules are the stored schedules (if stored) and the configured ones
// (if declared), but for those a stored schedule of the same name
// replaces.
func (s *scheduler) schedules(stored, declared bool) []schedule {
	var out []schedule
	if stored {
		out = append(out, s.stored...)
	}
	if !declared {
		return out
	}
	if len(s.stored) == 0 {
		return append(out, s.config...)
	}
	names := make(map[string]bool, len(s.stored))
	for _, sc := range s.stored {
		names[sc.Name] = true
	}
	for _, sc := range s.config {
		if names[sc.Name] {
			s.once("config:"+sc.Name, "skiplock: a stored schedule replaces Config.Periodic's schedule of the same name while it is stored")
			continue
		}
		s.once("config:"+sc.Name, "")
		out = append(out, sc)
	}
	return out
}

// storedSchedule is a stored schedule as the scheduler runs it: the same
// fields, the same CatchUp.
func storedSchedule(r queue.Schedule) (schedule, error) {
	sc := schedule{
		PeriodicTask: PeriodicTask{
			Name: r.Name, Cron: r.Cron, Every: r.Every, Task: r.Task, Payload: r.Payload, Options: r.Options(), CatchUp: r.CatchUp,
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

// scheduleOne enqueues the ticks of one schedule that came due since its
// last tick and records the latest as its last, in one transaction that
// holds the last tick's row lock: a second scheduler (a handover, a
// stalled one that woke up) waits for it and then finds the ticks
// handled. Each tick's task also carries a unique key (the schedule and
// the tick), so that no tick is enqueued twice, even by a scheduler whose
// clock is behind. Ticks at most the window late are enqueued, each once;
// later ones are missed: skipped, or with CatchUp the latest of them
// enqueued, and logged once with their count.
func (sc *scheduler) scheduleOne(ctx context.Context, s schedule) error {
	now := sc.now()
	window := cmp.Or(sc.window, onTimeWithin)
	return pgx.BeginFunc(ctx, sc.pool, func(tx pgx.Tx) error {
		last, err := sc.queries.PeriodicLockLastTick(ctx, pgerr.Interpreting(tx), s.Name)
		if errors.Is(err, pgerr.ErrNotFound) {
			// A new schedule starts with its next tick, not with the past.
			first := s.latestTick(time.Unix(0, 0), now)
			if first.IsZero() {
				first = now
			}
			return sc.queries.PeriodicSetLastTick(ctx, tx, db.PeriodicSetLastTickParams{Schedule: s.Name, LastTick: first})
		}
		if err != nil {
			return err
		}
		if s.paused {
			// A paused schedule's ticks pass unenqueued.
			tick := s.latestTick(last, now)
			if tick.IsZero() {
				return nil
			}
			return sc.queries.PeriodicSetLastTick(ctx, tx, db.PeriodicSetLastTickParams{Schedule: s.Name, LastTick: tick})
		}
		d := s.due(last, now, window)
		if d.latest.IsZero() {
			return nil
		}
		ticks := d.onTime
		if d.missed > 0 {
			sc.log.Warn("skiplock: periodic schedule missed ticks while no worker ran", "schedule", s.Name,
				"missed", d.missed, "later_than", window, "last_tick", last,
				"catch_up", s.CatchUp)
			if s.CatchUp {
				ticks = append([]time.Time{d.lastMissed}, ticks...)
			}
		}
		if len(ticks) > 0 {
			tasks := make([]queue.NewTask, len(ticks))
			for i, tick := range ticks {
				tasks[i] = queue.NewTask{Name: s.Task, Payload: s.Payload, Options: append(append([]queue.Option{}, s.Options...),
					queue.WithRunAt(tick),
					// Unique forever (one window that never ends): the key
					// names the schedule and the tick.
					queue.WithUniqueKey("periodic:"+s.Name+":"+strconv.FormatInt(tick.UnixNano(), 10)),
					queue.WithUniqueWindow(time.Duration(math.MaxInt64)))}
			}
			if ids, err := sc.producer.EnqueueManyTx(ctx, tx, tasks); ids == nil || (err != nil && !errors.Is(err, queue.ErrDuplicate)) {
				return err
			}
		}
		return sc.queries.PeriodicSetLastTick(ctx, tx, db.PeriodicSetLastTickParams{Schedule: s.Name, LastTick: d.latest})
	})
}
