package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// TestScheduleBadInput: every bad schedule and every change of a schedule
// that is not stored fails with one error naming what is wrong, and
// changes nothing.
func TestScheduleBadInput(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	ctx := context.Background()
	good := queue.Schedule{Name: "nightly", Cron: "0 3 * * *", Task: "report"}
	if err := c.AddSchedule(ctx, good); err != nil {
		t.Fatal(err)
	}
	with := func(f func(*queue.Schedule)) queue.Schedule {
		s := good
		s.Name = "other"
		f(&s)
		return s
	}
	for _, tc := range []struct {
		s    queue.Schedule
		want string
	}{
		{with(func(s *queue.Schedule) { s.Cron = "61 * * * *" }), `schedule "other": cron expression "61 * * * *" does not parse`},
		{with(func(s *queue.Schedule) { s.Cron = "every day" }), `cron expression "every day" does not parse`},
		{with(func(s *queue.Schedule) { s.Cron = "@every 5m" }), "not @every"},
		{with(func(s *queue.Schedule) { s.Every = time.Minute }), "set exactly one of a cron expression and an interval"},
		{with(func(s *queue.Schedule) { s.Cron = "" }), "set exactly one of a cron expression and an interval"},
		{with(func(s *queue.Schedule) { s.Cron, s.Every = "", 500*time.Millisecond }), "interval must be at least 1s, got 500ms"},
		{with(func(s *queue.Schedule) { s.Cron, s.Every = "", time.Second+time.Microsecond }), "whole number of milliseconds"},
		{with(func(s *queue.Schedule) { s.Name = "" }), "schedule name must be 1 to 255 bytes"},
		{with(func(s *queue.Schedule) { s.Name = " padded" }), "white space"},
		{with(func(s *queue.Schedule) { s.Task = "" }), "task name must be 1 to 255 bytes"},
		{with(func(s *queue.Schedule) { s.Payload = []byte("{nope") }), "payload is not valid JSON"},
		{with(func(s *queue.Schedule) { s.Priority = 40000 }), "priority 40000 is outside"},
		{with(func(s *queue.Schedule) { s.MaxAttempts = -1 }), "max attempts must be at least 1"},
		{with(func(s *queue.Schedule) { s.Queue = strings.Repeat("q", 300) }), "queue name is 300 bytes"},
	} {
		err := c.AddSchedule(ctx, tc.s)
		if !errors.Is(err, queue.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AddSchedule(%+v) = %v, want ErrInvalidRequest saying %q", tc.s, err, tc.want)
		}
		if err := c.UpdateSchedule(ctx, tc.s); !errors.Is(err, queue.ErrInvalidRequest) {
			t.Errorf("UpdateSchedule(%+v) = %v, want ErrInvalidRequest", tc.s, err)
		}
	}
	// A duplicate name.
	dup := good
	dup.Cron = "0 4 * * *"
	if err := c.AddSchedule(ctx, dup); !errors.Is(err, queue.ErrScheduleExists) || !strings.Contains(err.Error(), `"nightly"`) {
		t.Errorf("AddSchedule of a duplicate = %v, want ErrScheduleExists naming it", err)
	}
	// Unknown names.
	unknown := good
	unknown.Name = "ghost"
	for what, err := range map[string]error{
		"UpdateSchedule": c.UpdateSchedule(ctx, unknown),
		"PauseSchedule":  c.PauseSchedule(ctx, "ghost"),
		"ResumeSchedule": c.ResumeSchedule(ctx, "ghost"),
		"RemoveSchedule": c.RemoveSchedule(ctx, "ghost"),
	} {
		if !errors.Is(err, queue.ErrScheduleNotFound) || !strings.Contains(err.Error(), `"ghost"`) {
			t.Errorf("%s of an unknown schedule = %v, want ErrScheduleNotFound naming it", what, err)
		}
	}
	if _, err := c.GetSchedule(ctx, "ghost"); !errors.Is(err, queue.ErrScheduleNotFound) {
		t.Errorf("GetSchedule of an unknown schedule = %v", err)
	}
	// Nothing changed.
	got, err := c.Schedules(ctx)
	if err != nil || len(got) != 1 || got[0].Cron != "0 3 * * *" || got[0].Paused {
		t.Errorf("Schedules = %+v, %v; want the first one only, as added", got, err)
	}
}

// TestScheduleAudited: each change of a stored schedule is in the audit
// trail with its actor; a refused one is not.
func TestScheduleAudited(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	ctx := queue.WithActor(context.Background(), queue.Actor{Name: "ops@example.com", Source: queue.SourceCLI})
	s := queue.Schedule{Name: "digest", Every: time.Hour, Task: "digest.send", Queue: "mail", Priority: 2, MaxAttempts: 3, Timeout: time.Minute, CatchUp: true, Paused: true}
	if err := c.AddSchedule(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetSchedule(ctx, "digest")
	if err != nil {
		t.Fatal(err)
	}
	if got.Queue != "mail" || got.Priority != 2 || got.MaxAttempts != 3 || got.Timeout != time.Minute || !got.CatchUp || !got.Paused || got.Spec() != "every 1h0m0s" {
		t.Errorf("GetSchedule = %+v", got)
	}
	s.Every = 2 * time.Hour
	steps := []func() error{
		func() error { return c.UpdateSchedule(ctx, s) },
		func() error { return c.ResumeSchedule(ctx, "digest") },
		func() error { return c.PauseSchedule(ctx, "digest") },
		func() error { return c.RemoveSchedule(ctx, "digest") },
		func() error { return c.RemoveSchedule(ctx, "digest") }, // refused: gone
	}
	for _, step := range steps {
		step()
	}
	log, err := c.AuditLog(ctx, queue.AuditFilter{Actor: "ops@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for i := len(log) - 1; i >= 0; i-- {
		e := log[i]
		actions = append(actions, string(e.Action))
		if e.Source != queue.SourceCLI || !strings.Contains(string(e.Request), `"schedule": "digest"`) {
			t.Errorf("audit record %+v", e)
		}
	}
	want := "schedule-add schedule-set schedule-resume schedule-pause schedule-remove"
	if strings.Join(actions, " ") != want {
		t.Errorf("audit trail: %v, want %s", actions, want)
	}
}

// TestScheduleTx: a change made in the caller's transaction, rolled back,
// leaves neither the schedule nor an audit record; committed, both.
func TestScheduleTx(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	ctx := context.Background()
	s := queue.Schedule{Name: "tx", Every: time.Minute, Task: "t"}
	for _, commit := range []bool{false, true} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddScheduleTx(ctx, tx, s); err != nil {
			t.Fatal(err)
		}
		if err := c.PauseScheduleTx(ctx, tx, "tx"); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.GetSchedule(ctx, "tx")
		log, _ := c.AuditLog(ctx, queue.AuditFilter{})
		if commit && (err != nil || !got.Paused || len(log) != 2) {
			t.Errorf("committed: %+v, %v, %d audit records", got, err, len(log))
		}
		if !commit && (!errors.Is(err, queue.ErrScheduleNotFound) || len(log) != 0) {
			t.Errorf("rolled back: %v, %d audit records", err, len(log))
		}
	}
}
