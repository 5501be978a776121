package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/queue"
)

// TestRescueCountsDeaths: the rescue's rule for worker deaths, one step at
// a time. A worker whose session ended and that was heard from within the
// settle time may be dialling again: its tasks are rescued as suspects
// ("crash": null), and the death stops counting once it is heard from
// after the rescue. A death not yet sure never fails a task: the task
// whose third death it would be waits for a pass that knows; a sure one
// fails it, naming every death's worker, host and pid.
func TestRescueCountsDeaths(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	work, _ := schema.Channels(b.schema.Name)
	rescuer := func(settle time.Duration) *rescuer {
		return &rescuer{
			queries: b.queries, pool: b.pool, classOID: b.schema.TableOID, channel: work,
			beforeRescue: func(context.Context) {}, observer: NopObserver{}, self: "w-rescuer", mode: ModeAdvisory,
			log: b.log, maxCrashes: 3, settle: settle,
		}
	}
	lose := func(id string, n int) []int64 {
		g := newGuard(b.deps(t, id, ModeAdvisory, nil, nil))
		if err := g.open(ctx, b.schema.TableOID, &outage{log: b.log, what: "test"}); err != nil {
			t.Fatal(err)
		}
		rows := b.claim(t, g, id, n)
		g.close()
		b.waitTaskLocksGone(t)
		b.waitLockSessionGone(t, id)
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		return ids
	}
	task := func(id int64) *queue.Task {
		t.Helper()
		task, err := b.client.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return task
	}

	// Heard from just now: not sure.
	ids := lose("w-cut", 2)
	rescuer(time.Hour).rescue(ctx)
	for _, id := range ids {
		var unsure bool // "crash": null
		if err := b.pool.QueryRow(ctx, "SELECT errors -> -1 -> 'crash' = 'null'::jsonb FROM skiplock_tasks WHERE id = $1", id).Scan(&unsure); err != nil {
			t.Fatal(err)
		}
		if tk := task(id); tk.Status != queue.StatusPending || tk.Crashes != 1 || tk.Attempt != 0 || !unsure {
			t.Fatalf("task %d after an unsure death: %s, crashes %d, attempt %d, crash null %v", id, tk.Status, tk.Crashes, tk.Attempt, unsure)
		}
	}
	// The worker is heard from after the rescue: the death no longer counts.
	b.exec(t, "UPDATE skiplock_workers SET heartbeat_at = now() + interval '1 second' WHERE id = 'w-cut'")
	if n, err := b.queries.TaskSuspectsRecount(ctx, b.pool, []string{queue.DefaultQueue}); err != nil || n != 2 {
		t.Fatalf("recount cleared %d suspects (%v), want 2", n, err)
	}
	for _, id := range ids {
		if c := task(id).Crashes; c != 0 {
			t.Fatalf("task %d: crashes %d once its worker came back, want 0", id, c)
		}
	}

	// A task with two deaths that count (workers never heard from again).
	ghost := `{"outcome": "rescued", "crash": true, "worker_id": "w-ghost%d", "host": "h%d", "pid": %d,
		"worker_started_at": "2000-01-01T00:00:00Z", "finished_at": "2000-01-01T00:00:01Z"}`
	poison := lose("w-third", 1)[0]
	b.exec(t, "UPDATE skiplock_tasks SET errors = errors || jsonb_build_array($2::jsonb, $3::jsonb) WHERE id = $1",
		poison, strings.NewReplacer("%d", "1").Replace(ghost), strings.NewReplacer("%d", "2").Replace(ghost))
	// Its third death is not sure yet: it waits, running.
	rescuer(time.Hour).rescue(ctx)
	if s := b.status(t, poison); s != "running" {
		t.Fatalf("a task whose third death is not sure is %s, want running until a pass knows", s)
	}
	// Sure now (no settle): failed, naming the three deaths.
	rescuer(0).rescue(ctx)
	tk := task(poison)
	last := tk.Errors[len(tk.Errors)-1]
	if tk.Status != queue.StatusFailed || tk.Crashes != 3 || !last.Crash ||
		!strings.Contains(last.Error, "running during 3 worker deaths (worker w-ghost1 on host h1, pid 1; worker w-ghost2 on host h2, pid 2; worker w-third on host test, pid 1)") {
		t.Fatalf("poison task: %s, crashes %d, last entry %+v", tk.Status, tk.Crashes, last)
	}
}

// TestClaimsPassSuspectsOver: a suspect (crashes > 0) is taken by no
// ordinary claim, in either mode or statement, and by the claim that names
// it by id (the isolator's).
func TestClaimsPassSuspectsOver(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	suspect, err := b.client.Enqueue(ctx, "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	b.exec(t, "UPDATE skiplock_tasks SET crashes = 1 WHERE id = $1", suspect.ID)
	p := db.TaskClaimParams{
		WorkerID: "w", Queue: queue.DefaultQueue, OnlyNames: []string{}, SkipNames: []string{}, OnlyIds: []int64{}, Max: 10,
		ExclusiveSeed: b.schema.TableOID, CheckFull: true,
	}
	for _, mode := range []Mode{ModeAdvisory, ModeLease} {
		g := newGuard(b.deps(t, "w", mode, nil, nil))
		if err := g.open(ctx, b.schema.TableOID, &outage{log: b.log, what: "test"}); err != nil {
			t.Fatal(err)
		}
		for _, how := range []claimHow{howPlain, howLimited, howQueue} {
			if mode == ModeLease && how == howQueue {
				continue
			}
			rows, _, _, err := g.claim(p, how, nil)
			if err != nil || len(rows) != 0 {
				t.Fatalf("mode %d, claim %d took %d rows (%v), want none: a suspect runs alone", mode, how, len(rows), err)
			}
		}
		byID := p
		byID.OnlyIds = []int64{suspect.ID}
		rows, _, _, err := g.claim(byID, howLimited, nil)
		if err != nil || len(rows) != 1 || rows[0].ID != suspect.ID {
			t.Fatalf("mode %d: the claim by id took %v (%v), want the suspect", mode, rows, err)
		}
		b.exec(t, "UPDATE skiplock_tasks SET status = 'pending', attempt = 0, locked_until = NULL WHERE id = $1", suspect.ID)
		g.close()
		b.waitTaskLocksGone(t)
	}
}
