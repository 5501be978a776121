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

type thumbnail struct {
	Size int `json:"size"`
}

func (thumbnail) TaskName() string { return "thumbnail" }

func (thumbnail) TaskOptions() []queue.Option { return []queue.Option{queue.WithQueue("media")} }

// A batch's members are pending and its callbacks waiting, all with its
// id; Batch.Options apply to each, under each task's own; typed members
// take their type's name and options.
func TestEnqueueBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	b := queue.Batch{
		Name:      "import",
		Options:   []queue.Option{queue.WithPriority(3), queue.WithMaxAttempts(4)},
		OnFinish:  queue.NewTask{Name: "import.report", Payload: map[string]string{"to": "ops"}},
		OnSuccess: queue.NewTask{Name: "import.publish", Options: []queue.Option{queue.WithQueue("publish")}},
	}
	b.Add("import.row", 1).Add("import.row", 2, queue.WithPriority(-1)).AddArgs(thumbnail{Size: 64})
	enq, err := c.EnqueueBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(enq.TaskIDs) != 3 || enq.OnFinishTaskID == 0 || enq.OnSuccessTaskID == 0 || enq.ID == 0 {
		t.Fatalf("enqueued %+v", enq)
	}
	check := func(id int64, name, q string, status queue.Status, priority int) {
		t.Helper()
		task, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.Name != name || task.Queue != q || task.Status != status || task.Priority != priority || task.MaxAttempts != 4 || task.BatchID != enq.ID {
			t.Errorf("task %d: %s in %s, %s, priority %d, max attempts %d, batch %d; want %s in %s, %s, priority %d, 4, batch %d",
				id, task.Name, task.Queue, task.Status, task.Priority, task.MaxAttempts, task.BatchID, name, q, status, priority, enq.ID)
		}
	}
	check(enq.TaskIDs[0], "import.row", "default", queue.StatusPending, 3)
	check(enq.TaskIDs[1], "import.row", "default", queue.StatusPending, -1)
	check(enq.TaskIDs[2], "thumbnail", "media", queue.StatusPending, 3)
	check(enq.OnFinishTaskID, "import.report", "default", queue.StatusWaiting, 3)
	check(enq.OnSuccessTaskID, "import.publish", "publish", queue.StatusWaiting, 3)

	info, err := c.GetBatch(ctx, enq.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "import" || info.Total != 3 || info.Unfinished() != 3 || info.OnFinishTaskID != enq.OnFinishTaskID ||
		info.OnSuccessTaskID != enq.OnSuccessTaskID || info.FinishedAt != nil {
		t.Errorf("GetBatch: %+v", info)
	}
	tasks, err := c.BatchTasks(ctx, enq.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 5 {
		t.Errorf("BatchTasks: %d tasks, want 5", len(tasks))
	}
	if got, err := c.BatchOfTask(ctx, enq.OnFinishTaskID); err != nil || got.ID != enq.ID {
		t.Errorf("BatchOfTask(OnFinish): %+v, %v", got, err)
	}
	list, err := c.ListBatches(ctx, queue.BatchFilter{State: "running"})
	if err != nil || len(list) != 1 || list[0].ID != enq.ID {
		t.Errorf("ListBatches(running): %v, %v", list, err)
	}
	if list, err := c.ListBatches(ctx, queue.BatchFilter{State: "finished"}); err != nil || len(list) != 0 {
		t.Errorf("ListBatches(finished): %v, %v", list, err)
	}

	// Cancelling every member finishes the batch: OnFinish is released,
	// OnSuccess cancelled.
	if _, err := c.Cancel(ctx, queue.CancelRequest{Filter: queue.Filter{IDs: enq.TaskIDs}}); err != nil {
		t.Fatal(err)
	}
	info, err = c.GetBatch(ctx, enq.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cancelled != 3 || info.FinishedAt == nil {
		t.Errorf("after cancelling every member: %+v", info)
	}
	check(enq.OnFinishTaskID, "import.report", "default", queue.StatusPending, 3)
	succ, err := c.Get(ctx, enq.OnSuccessTaskID)
	if err != nil {
		t.Fatal(err)
	}
	if succ.Status != queue.StatusCancelled || !strings.Contains(succ.Errors[len(succ.Errors)-1].Error, "0 completed, 0 failed and 3 cancelled of 3") {
		t.Errorf("OnSuccess: %s, %+v", succ.Status, succ.Errors)
	}
}

// Bad batches are refused with an error naming what is wrong, and insert
// nothing; so is a batch whose transaction rolls back.
func TestEnqueueBatchRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)
	member := []queue.NewTask{{Name: "m"}}
	for _, tc := range []struct {
		name  string
		batch queue.Batch
		want  string
	}{
		{"empty with a callback", queue.Batch{Name: "b", OnFinish: queue.NewTask{Name: "done"}}, `batch "b": no tasks, so its callbacks would never run`},
		{"empty", queue.Batch{}, `batch "": no tasks`},
		{"callback without a name", queue.Batch{Tasks: member, OnSuccess: queue.NewTask{Payload: 1}}, "Batch.OnSuccess has a payload or options but no Name"},
		{"member without a name", queue.Batch{Tasks: []queue.NewTask{{Name: "m"}, {}}}, "task 1"},
		{"unique member", queue.Batch{Tasks: []queue.NewTask{{Name: "m", Options: []queue.Option{queue.WithUniqueKey("k")}}}}, "WithUniqueKey does not apply to a task of a batch"},
		{"unique batch", queue.Batch{Tasks: member, Options: []queue.Option{queue.WithUnique()}}, "Batch.Options: skiplock: invalid task: WithUnique does not apply"},
		{"dependent callback", queue.Batch{Tasks: member, OnFinish: queue.NewTask{Name: "done", Options: []queue.Option{queue.WithDependsOn(1)}}}, "Batch.OnFinish (\"done\"): skiplock: invalid task: WithDependsOn"},
		{"sequenced member", queue.Batch{Tasks: []queue.NewTask{{Name: "m", Options: []queue.Option{queue.WithSequence("s")}}}}, "WithSequence does not apply"},
		{"debounced member", queue.Batch{Tasks: []queue.NewTask{{Name: "m", Options: []queue.Option{queue.WithDebounce("k", time.Second)}}}}, "WithReplaceKey or WithDebounce does not apply to a task of a batch"},
		{"replacing batch", queue.Batch{Tasks: member, Options: []queue.Option{queue.WithReplaceKey("k")}}, "Batch.Options: skiplock: invalid task: WithReplaceKey or WithDebounce"},
		{"bad option", queue.Batch{Tasks: member, Options: []queue.Option{queue.WithMaxAttempts(-1)}}, "Batch.Options"},
		{"bad payload", queue.Batch{Tasks: member, OnFinish: queue.NewTask{Name: "done", Payload: func() {}}}, "Batch.OnFinish"},
	} {
		_, err := c.EnqueueBatch(ctx, tc.batch)
		if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidTask saying %q", tc.name, err, tc.want)
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueBatchTx(ctx, tx, queue.Batch{Tasks: member, OnFinish: queue.NewTask{Name: "done"}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var tasks, batches int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM skiplock_tasks), (SELECT count(*) FROM skiplock_batches)").Scan(&tasks, &batches); err != nil {
		t.Fatal(err)
	}
	if tasks != 0 || batches != 0 {
		t.Errorf("%d tasks and %d batches after refusals and a rollback, want none", tasks, batches)
	}
	if _, err := c.GetBatch(ctx, 12345); !errors.Is(err, queue.ErrBatchNotFound) {
		t.Errorf("GetBatch(unknown): %v", err)
	}
	id, err := c.Enqueue(ctx, "plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchOfTask(ctx, id.ID); !errors.Is(err, queue.ErrNotInBatch) {
		t.Errorf("BatchOfTask(plain task): %v", err)
	}
	if _, err := c.BatchOfTask(ctx, id.ID+100); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("BatchOfTask(unknown task): %v", err)
	}
	if _, err := c.ListBatches(ctx, queue.BatchFilter{State: "done"}); !errors.Is(err, queue.ErrInvalidRequest) {
		t.Errorf("ListBatches(state done): %v", err)
	}
}
