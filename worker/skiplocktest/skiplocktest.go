// Package skiplocktest helps test code that uses skiplock, against a real
// PostgreSQL test database: assert what a transaction enqueued, run one
// task's handler as a worker would, and give each test an isolated,
// migrated schema.
//
//	func TestSignup(t *testing.T) {
//		pool := skiplocktest.Schema(t, os.Getenv("TEST_DATABASE_URL"))
//		tx, _ := pool.Begin(ctx)
//		if err := app.Signup(ctx, tx, "ada@example.com"); err != nil { // enqueues email.send in tx
//			t.Fatal(err)
//		}
//		task := skiplocktest.RequireEnqueued(t, tx, "email.send", &skiplocktest.Want{
//			Payload: map[string]any{"to": "ada@example.com"}, Queue: "mail",
//		})
//		tx.Commit(ctx)
//		// One attempt, through the Config's middleware, hooks and retry rules.
//		res := skiplocktest.Work(ctx, t, worker.New(pool, appConfig), app.Handlers(), task.ID)
//		if res.Status != queue.StatusCompleted {
//			t.Fatalf("%s: %s", res.Outcome, res.Error)
//		}
//	}
//
// The assertions take a TB, which *testing.T and *testing.B satisfy, and
// fail it with Fatalf, naming the tasks they saw.
package skiplocktest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TB is the part of testing.TB the helpers use: *testing.T, *testing.B and
// *testing.F satisfy it, and so can a test's own recorder.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Want is what an enqueued task must look like, beyond its name. Fields
// left at their zero value are not checked; the fields that are set must
// all match.
type Want struct {
	// Payload must be contained in the task's payload, as jsonb's @>
	// has it: an object matches an object that has at least its keys with
	// matching values, an array one that has at least its elements. A
	// struct is encoded as the task's payload would be, so its zero fields
	// must match too; use a map for a partial match.
	Payload any
	// Metadata must be contained in the task's metadata, likewise.
	Metadata any
	// Queue, Priority, MaxAttempts and Timeout must equal the task's.
	// Priority is a pointer because 0 is a priority: new(-1).
	Queue       string
	Priority    *int
	MaxAttempts int
	Timeout     time.Duration
	// Status must be the task's status.
	Status queue.Status
	// UniqueKey and ExclusiveKey must equal the task's keys
	// (queue.WithUniqueKey, WithExclusiveKey); a unique key within a window
	// is compared without its window.
	UniqueKey    string
	ExclusiveKey string
	// SequenceKey must equal the task's sequence key (queue.WithSequence).
	SequenceKey string
	// RunAt must equal the task's run time, to the microsecond PostgreSQL
	// keeps (queue.WithRunAt), or be within RunAtLeeway of it: a run time
	// from queue.WithDelay is the database's clock at the insert plus the
	// delay, so compare it with time.Now().Add(delay) and a leeway.
	RunAt       time.Time
	RunAtLeeway time.Duration
}

// Expected is one task of RequireManyEnqueued: its name, and what it must
// look like.
type Expected struct {
	Name string
	Want
}

// maxTasks bounds how many tasks of the names asked about an assertion
// reads: queue.MaxListLimit, the newest.
const maxTasks = queue.MaxListLimit

// RequireEnqueued asserts that exactly one task named name, visible to exec,
// matches want (nil: any task of the name), and returns it. exec is what
// the code under test enqueued through: in a transaction it sees the
// tasks the transaction enqueued and has not committed, and committed
// ones; a pool sees committed ones. It fails t with Fatalf, listing the
// tasks of the name it saw, when none matches or more than one does
// (RequireManyEnqueued asserts several).
func RequireEnqueued(t TB, exec queue.Executor, name string, want *Want) *queue.Task {
	t.Helper()
	tasks, ok := tasksNamed(t, exec, []string{name})
	if !ok {
		return nil
	}
	var matched []*queue.Task
	var why []string
	for _, task := range tasks {
		diff, ok := mismatch(t, exec, task, want)
		if !ok {
			return nil
		}
		if diff == "" {
			matched = append(matched, task)
		} else {
			why = append(why, fmt.Sprintf("task %d: %s", task.ID, diff))
		}
	}
	switch len(matched) {
	case 1:
		return matched[0]
	case 0:
		if len(tasks) == 0 {
			t.Fatalf("skiplocktest: no task %q was enqueued", name)
		} else {
			t.Fatalf("skiplocktest: no task %q matches %s; %d seen:\n  %s", name, want.describe(), len(tasks), strings.Join(why, "\n  "))
		}
	default:
		t.Fatalf("skiplocktest: %d tasks %q match %s (tasks %s); expected one (RequireManyEnqueued asserts several)",
			len(matched), name, want.describe(), idList(matched))
	}
	return nil
}

// RequireNotEnqueued asserts that no task named name, visible to exec,
// matches want (nil: no task of the name at all). It fails t with Fatalf,
// naming the tasks that match.
func RequireNotEnqueued(t TB, exec queue.Executor, name string, want *Want) {
	t.Helper()
	tasks, ok := tasksNamed(t, exec, []string{name})
	if !ok {
		return
	}
	var matched []*queue.Task
	for _, task := range tasks {
		diff, ok := mismatch(t, exec, task, want)
		if !ok {
			return
		}
		if diff == "" {
			matched = append(matched, task)
		}
	}
	if len(matched) > 0 {
		t.Fatalf("skiplocktest: expected no task %q matching %s, found %d: %s",
			name, want.describe(), len(matched), describeTasks(matched))
	}
}

// RequireManyEnqueued asserts that the tasks visible to exec whose names
// appear in want are exactly want, in the order they were enqueued (by
// ID): as many, each with its name and matching its Want. It returns them
// in that order, and fails t with Fatalf, listing the tasks it saw, when
// they differ.
func RequireManyEnqueued(t TB, exec queue.Executor, want []Expected) []*queue.Task {
	t.Helper()
	var names []string
	for _, w := range want {
		if !slices.Contains(names, w.Name) {
			names = append(names, w.Name)
		}
	}
	tasks, ok := tasksNamed(t, exec, names)
	if !ok {
		return nil
	}
	var problems []string
	for i, w := range want {
		if i >= len(tasks) {
			problems = append(problems, fmt.Sprintf("#%d: want a task %q, missing", i, w.Name))
			continue
		}
		task := tasks[i]
		if task.Name != w.Name {
			problems = append(problems, fmt.Sprintf("#%d (task %d): name %q, want %q", i, task.ID, task.Name, w.Name))
			continue
		}
		diff, ok := mismatch(t, exec, task, &w.Want)
		if !ok {
			return nil
		}
		if diff != "" {
			problems = append(problems, fmt.Sprintf("#%d (task %d, %q): %s", i, task.ID, task.Name, diff))
		}
	}
	for i := len(want); i < len(tasks); i++ {
		problems = append(problems, fmt.Sprintf("#%d (task %d): unexpected task %q", i, tasks[i].ID, tasks[i].Name))
	}
	if len(problems) > 0 {
		t.Fatalf("skiplocktest: the tasks enqueued are not the %d expected:\n  %s\nseen, in order: %s",
			len(want), strings.Join(problems, "\n  "), describeTasks(tasks))
		return nil
	}
	return tasks
}

// Work runs one attempt of the pending task id with w, through w's
// middleware, hooks and retry rules (worker.Worker.RunTask), and returns
// what it came to once its outcome is written. An error of the attempt is
// an outcome, not a failure of the test: Work fails t with Fatalf only when
// the attempt could not be run (no such task, not pending, no database).
// w need not be running.
func Work(ctx context.Context, t TB, w *worker.Worker, handlers worker.Handlers, id int64) *worker.RunResult {
	t.Helper()
	res, err := w.RunTask(ctx, handlers, id)
	if err != nil {
		t.Fatalf("skiplocktest: working task %d: %v", id, err)
		return nil
	}
	return res
}

// tasksNamed reads the tasks with the names visible to exec, oldest first.
func tasksNamed(t TB, exec queue.Executor, names []string) ([]*queue.Task, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// ListTx reads through exec alone: the client's pool is never used.
	tasks, err := queue.New(nil).ListTx(ctx, exec, queue.Filter{Names: names}, queue.Page{Limit: maxTasks})
	if err != nil {
		t.Fatalf("skiplocktest: reading tasks %q: %v", names, err)
		return nil, false
	}
	slices.Reverse(tasks)
	return tasks, true
}

// mismatch says how task differs from want; "" when it matches. ok is
// false when t was failed (the database could not be asked).
func mismatch(t TB, exec queue.Executor, task *queue.Task, want *Want) (diff string, ok bool) {
	t.Helper()
	if want == nil {
		return "", true
	}
	var diffs []string
	if want.Queue != "" && task.Queue != want.Queue {
		diffs = append(diffs, fmt.Sprintf("queue %q, want %q", task.Queue, want.Queue))
	}
	if want.Priority != nil && task.Priority != *want.Priority {
		diffs = append(diffs, fmt.Sprintf("priority %d, want %d", task.Priority, *want.Priority))
	}
	if want.MaxAttempts != 0 && task.MaxAttempts != want.MaxAttempts {
		diffs = append(diffs, fmt.Sprintf("max attempts %d, want %d", task.MaxAttempts, want.MaxAttempts))
	}
	if want.Timeout != 0 && task.Timeout != want.Timeout {
		diffs = append(diffs, fmt.Sprintf("timeout %s, want %s", task.Timeout, want.Timeout))
	}
	if want.Status != "" && task.Status != want.Status {
		diffs = append(diffs, fmt.Sprintf("status %s, want %s", task.Status, want.Status))
	}
	if want.UniqueKey != "" && task.UniqueKey != want.UniqueKey {
		diffs = append(diffs, fmt.Sprintf("unique key %q, want %q", task.UniqueKey, want.UniqueKey))
	}
	if want.ExclusiveKey != "" && task.ExclusiveKey != want.ExclusiveKey {
		diffs = append(diffs, fmt.Sprintf("exclusive key %q, want %q", task.ExclusiveKey, want.ExclusiveKey))
	}
	if want.SequenceKey != "" && task.SequenceKey != want.SequenceKey {
		diffs = append(diffs, fmt.Sprintf("sequence key %q, want %q", task.SequenceKey, want.SequenceKey))
	}
	if !want.RunAt.IsZero() {
		off := task.RunAt.Sub(want.RunAt.Truncate(time.Microsecond)).Abs()
		if off > want.RunAtLeeway {
			diffs = append(diffs, fmt.Sprintf("run at %s, want %s ± %s", task.RunAt.Format(time.RFC3339Nano), want.RunAt.Format(time.RFC3339Nano), want.RunAtLeeway))
		}
	}
	for _, c := range []struct {
		what      string
		have      json.RawMessage
		contained any
	}{{"payload", task.Payload, want.Payload}, {"metadata", task.Metadata, want.Metadata}} {
		if c.contained == nil {
			continue
		}
		wantJSON, err := schema.EncodePayload(c.contained)
		if err != nil {
			t.Fatalf("skiplocktest: Want.%s: %v", strings.ToUpper(c.what[:1])+c.what[1:], err)
			return "", false
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		contains, err := db.New().JSONContains(ctx, exec, db.JSONContainsParams{Container: c.have, Contained: wantJSON})
		cancel()
		if err != nil {
			t.Fatalf("skiplocktest: comparing %s: %v", c.what, err)
			return "", false
		}
		if !contains {
			diffs = append(diffs, fmt.Sprintf("%s %s does not contain %s", c.what, c.have, wantJSON))
		}
	}
	return strings.Join(diffs, "; "), true
}

// describe names what a Want asks for, for failure messages.
func (w *Want) describe() string {
	if w == nil {
		return "anything"
	}
	var parts []string
	if w.Payload != nil {
		b, _ := schema.EncodePayload(w.Payload)
		parts = append(parts, "payload ⊇ "+string(b))
	}
	if w.Metadata != nil {
		b, _ := schema.EncodePayload(w.Metadata)
		parts = append(parts, "metadata ⊇ "+string(b))
	}
	if w.Queue != "" {
		parts = append(parts, fmt.Sprintf("queue %q", w.Queue))
	}
	if w.Priority != nil {
		parts = append(parts, fmt.Sprintf("priority %d", *w.Priority))
	}
	if w.MaxAttempts != 0 {
		parts = append(parts, fmt.Sprintf("max attempts %d", w.MaxAttempts))
	}
	if w.Timeout != 0 {
		parts = append(parts, fmt.Sprintf("timeout %s", w.Timeout))
	}
	if w.Status != "" {
		parts = append(parts, "status "+string(w.Status))
	}
	if w.UniqueKey != "" {
		parts = append(parts, fmt.Sprintf("unique key %q", w.UniqueKey))
	}
	if w.ExclusiveKey != "" {
		parts = append(parts, fmt.Sprintf("exclusive key %q", w.ExclusiveKey))
	}
	if w.SequenceKey != "" {
		parts = append(parts, fmt.Sprintf("sequence key %q", w.SequenceKey))
	}
	if !w.RunAt.IsZero() {
		parts = append(parts, fmt.Sprintf("run at %s ± %s", w.RunAt.Format(time.RFC3339Nano), w.RunAtLeeway))
	}
	if len(parts) == 0 {
		return "anything"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func describeTasks(tasks []*queue.Task) string {
	if len(tasks) == 0 {
		return "none"
	}
	parts := make([]string, len(tasks))
	for i, t := range tasks {
		parts[i] = fmt.Sprintf("task %d %q (queue %q, %s, payload %s)", t.ID, t.Name, t.Queue, t.Status, t.Payload)
	}
	return strings.Join(parts, ", ")
}

func idList(tasks []*queue.Task) string {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = fmt.Sprint(t.ID)
	}
	return strings.Join(ids, ", ")
}
