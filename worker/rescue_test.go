package worker

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
)

type rescueCounter struct {
	NopObserver
	rescued atomic.Int64
}

func (o *rescueCounter) Rescued(string, string) { o.rescued.Add(1) }

func TestRescuerReturnsExpiredLeases(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	g := newGuard(b.deps(t, "w1", ModeLease, nil, nil))
	rows := b.claim(t, g, "w1", 2)
	b.exec(t, "UPDATE skiplock_tasks SET locked_until = now() - interval '1 second' WHERE id = $1", rows[0].ID)
	obs := &rescueCounter{}
	work, _ := schema.Channels(b.schema.Name)
	var logs bytes.Buffer
	r := &rescuer{
		queries: b.queries, pool: b.pool, classOID: b.schema.TableOID, channel: work,
		beforeRescue: g.beforeRescue, observer: obs, log: slog.New(slog.NewTextHandler(&logs, nil)),
		self: "w1", mode: ModeLease,
	}
	if n := r.rescue(context.Background()); n != 1 {
		t.Errorf("the pass reports %d tasks rescued, want 1", n)
	}
	if !strings.Contains(logs.String(), "this worker's leases expired before it could renew them") ||
		!strings.Contains(logs.String(), "worker_id=w1 returned_to_queue=1") {
		t.Errorf("log of the rescue of this worker's own task:\n%s", logs.String())
	}
	if s := b.status(t, rows[0].ID); s != "pending" {
		t.Errorf("task with an expired lease is %s, want pending", s)
	}
	if s := b.status(t, rows[1].ID); s != "running" {
		t.Errorf("task with a live lease is %s, want running", s)
	}
	if n := obs.rescued.Load(); n != 1 {
		t.Errorf("observer saw %d rescues, want 1", n)
	}
}

// TestRescuerNamesWhatWasLost: tasks orphaned by another worker are logged
// as that worker's, gone; tasks of the rescuer's own worker (its lock
// session lost to a server restart or failover, and back) are logged as
// this worker's lost session, with how many went back to the queue.
func TestRescuerNamesWhatWasLost(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	// A guard's lock session ends when it is closed: its locks go, and
	// the tasks it claimed are orphans.
	self := newGuard(b.deps(t, "w-self", ModeAdvisory, nil, nil))
	other := newGuard(b.deps(t, "w-other", ModeAdvisory, nil, nil))
	for _, g := range []guard{self, other} {
		if err := g.open(context.Background(), b.schema.TableOID, &outage{log: b.log, what: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	b.claim(t, self, "w-self", 2)
	b.claim(t, other, "w-other", 1)
	self.close()
	other.close()
	// A closed connection's backend exits, and its locks go, a moment
	// after the client has hung up.
	pgtest.Eventually(t, 10*time.Second, "the closed sessions' task locks to go", func() bool {
		var n int
		err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::bigint::oid`, b.schema.TableOID).Scan(&n)
		return err == nil && n == 0
	})

	var logs bytes.Buffer
	work, _ := schema.Channels(b.schema.Name)
	r := &rescuer{
		queries: b.queries, pool: b.pool, classOID: b.schema.TableOID, channel: work,
		beforeRescue: func(context.Context) {}, observer: NopObserver{}, self: "w-self", mode: ModeAdvisory,
		log: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	r.rescue(context.Background())
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want two lines, one per worker:\n%s", logs.String())
	}
	for _, want := range []string{
		`msg="skiplock: this worker's lock session was lost (a server restart, a failover or a network cut); its running tasks were returned to the queue" worker_id=w-self returned_to_queue=2 failed_out_of_attempts=0`,
		`msg="skiplock: rescued tasks whose worker is gone" lost_worker=w-other count=1 failed_out_of_attempts=0`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no line with %s in:\n%s", want, logs.String())
		}
	}
	if n := strings.Count(logs.String(), "whose worker is gone"); n != 1 {
		t.Errorf("%d lines call a worker gone, want 1 (w-other's)", n)
	}
}

// TestRescuePacer: a pass that rescued nothing is followed no sooner than
// rescueRatio times what it took; one that rescued tasks, at the next
// interval whatever it took.
func TestRescuePacer(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var p rescuePacer
	if !p.ready(t0) {
		t.Fatal("the first pass must be due at once")
	}
	p.passed(t0, 5*time.Millisecond, 0)
	if !p.ready(t0.Add(time.Second)) {
		t.Fatal("a pass of 5 ms delayed the next past the interval")
	}
	p.passed(t0, 2*time.Second, 0)
	if p.ready(t0.Add(rescueRatio*2*time.Second - time.Millisecond)) {
		t.Fatal("a pass of 2 s that rescued nothing was followed before rescueRatio times 2 s")
	}
	if !p.ready(t0.Add(rescueRatio * 2 * time.Second)) {
		t.Fatal("the pass after a slow one never came")
	}
	p.passed(t0, 2*time.Second, 3)
	if !p.ready(t0.Add(time.Second)) {
		t.Fatal("a pass that rescued tasks delayed the next")
	}
}
