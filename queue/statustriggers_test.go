package queue_test

import (
	"context"
	"testing"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// The status triggers of workflows, sequences and batches let every change
// but a claim through their WHEN clauses, and their functions turn away
// the ones their feature does not concern: a claim, a retry (running back
// to pending) and a change made inside another trigger move nothing on;
// a completion still does. Each step is a plain UPDATE, as any tool's.
func TestStatusTriggersActOnlyOnTheirChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := queue.New(pool)

	wf, err := c.EnqueueWorkflow(ctx, queue.Workflow{
		Steps: []queue.Step{{Name: "root"}, {Name: "child", DependsOn: []string{"root"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Enqueue(ctx, "seq", 1, queue.WithSequence("s"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Enqueue(ctx, "seq", 2, queue.WithSequence("s"))
	if err != nil {
		t.Fatal(err)
	}
	b := queue.Batch{OnFinish: queue.NewTask{Name: "batch.done"}}
	b.Add("member", 1).Add("member", 2)
	batch, err := c.EnqueueBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	root, child := wf.TaskIDs["root"], wf.TaskIDs["child"]
	member := batch.TaskIDs[0]

	set := func(status string, ids ...int64) {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE skiplock_tasks SET status = $1 WHERE id = ANY($2)`, status, ids); err != nil {
			t.Fatal(err)
		}
	}
	want := func(when string, wantChild, wantSecond queue.Status, wantCounts [3]int) {
		t.Helper()
		if got := statusOf(t, c, child); got != wantChild {
			t.Errorf("%s: the workflow's child is %s, want %s", when, got, wantChild)
		}
		if got := statusOf(t, c, second.ID); got != wantSecond {
			t.Errorf("%s: the sequence's second task is %s, want %s", when, got, wantSecond)
		}
		var counts [3]int
		err := pool.QueryRow(ctx, `SELECT completed, failed, cancelled FROM skiplock_batches WHERE id = $1`, batch.ID).
			Scan(&counts[0], &counts[1], &counts[2])
		if err != nil {
			t.Fatal(err)
		}
		if counts != wantCounts {
			t.Errorf("%s: the batch counts completed, failed, cancelled %v, want %v", when, counts, wantCounts)
		}
	}
	waiting, pending := queue.StatusWaiting, queue.StatusPending
	want("enqueued", waiting, waiting, [3]int{})

	set("running", root, first.ID, member) // a claim
	want("claimed", waiting, waiting, [3]int{})
	set("pending", root, first.ID, member) // a retry
	want("retried", waiting, waiting, [3]int{})
	set("running", root, first.ID, member)

	// Completed by an application's trigger: the batch and the sequence
	// move on, the workflow does not (skiplock_workflow_advance's
	// condition on the trigger depth, kept from its WHEN clause).
	_, err = pool.Exec(ctx, `
		CREATE TABLE app_done (id bigint);
		CREATE FUNCTION app_done_complete() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			UPDATE skiplock_tasks SET status = 'completed' WHERE id = NEW.id;
			RETURN NULL;
		END $$;
		CREATE TRIGGER app_done_complete AFTER INSERT ON app_done
			FOR EACH ROW EXECUTE FUNCTION app_done_complete()`)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{root, first.ID, member} {
		if _, err := pool.Exec(ctx, `INSERT INTO app_done VALUES ($1)`, id); err != nil {
			t.Fatal(err)
		}
	}
	want("completed by a trigger", waiting, pending, [3]int{1, 0, 0})

	set("running", root)
	set("completed", root)
	want("completed", pending, pending, [3]int{1, 0, 0})
}

func statusOf(t *testing.T, c *queue.Client, id int64) queue.Status {
	t.Helper()
	task, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return task.Status
}
