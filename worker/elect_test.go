package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
)

func TestLeaseGuardElectsOneLeader(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	g1, g2 := newGuard(b.deps(t, "w1", ModeLease, nil, nil)), newGuard(b.deps(t, "w2", ModeLease, nil, nil))
	e1 := newElector(rescuerJob, g1, b.log, "w1")
	e2 := newElector(rescuerJob, g2, b.log, "w2")
	if !e1.lead(ctx) || e2.lead(ctx) {
		t.Fatalf("first candidate leads: %v, second leads: %v; want only the first", e1.isLeader(), e2.isLeader())
	}
	if !e1.lead(ctx) {
		t.Fatal("the leader lost its leadership on renewal")
	}
	g1.resign(electedJobs)
	if !e2.lead(ctx) {
		t.Fatal("the second candidate did not take over after the leader resigned")
	}
}

// TestAdvisoryElectorHandsOver: of two candidates on two lock sessions
// exactly one leads, and keeps leading while its session lives; once the
// server ends that session, the other takes over, and the first, back on a
// new session, does not take it back.
func TestAdvisoryElectorHandsOver(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	g1 := b.openAdvisory(t, b.deps(t, "w1", ModeAdvisory, nil, nil))
	g2 := b.openAdvisory(t, b.deps(t, "w2", ModeAdvisory, nil, nil))
	e1, e2 := newElector(rescuerJob, g1, b.log, "w1"), newElector(rescuerJob, g2, b.log, "w2")
	for range 3 {
		if !e1.lead(ctx) || e2.lead(ctx) {
			t.Fatalf("first candidate leads: %v, second leads: %v; want only the first", e1.isLeader(), e2.isLeader())
		}
	}
	first := b.lockBackend(t, "w1")
	if pids := b.leaderBackends(t, leaderJobRescuer); len(pids) != 1 || pids[0] != first {
		t.Fatalf("election lock held by backends %v, want the first candidate's %d", pids, first)
	}

	b.exec(t, "SELECT pg_terminate_backend($1)", first)
	pgtest.Eventually(t, time.Second, "the second candidate leading", func() bool { return e2.lead(ctx) })
	// In a worker the session's health job notices the loss; here a ping
	// does, and the session reconnects.
	if err := g1.ls.ping(0, nil); !errors.Is(err, errSessionDown) {
		t.Fatalf("ping of the ended session: %v, want errSessionDown", err)
	}
	pgtest.Eventually(t, time.Second, "the first candidate's session back", func() bool {
		gen, up := g1.ls.generation()
		return up && gen == 2
	})
	if e1.lead(ctx) || !e2.lead(ctx) {
		t.Fatalf("after the handover first leads: %v, second leads: %v; want only the second", e1.isLeader(), e2.isLeader())
	}
	if pids, second := b.leaderBackends(t, leaderJobRescuer), b.lockBackend(t, "w2"); len(pids) != 1 || pids[0] != second {
		t.Fatalf("election lock held by backends %v, want the second candidate's %d", pids, second)
	}
}

// TestDeclaredJob: the election of a declared set of schedules depends on
// the set of names only, and its advisory job number stays clear of the
// fixed jobs and of the claim turns.
func TestDeclaredJob(t *testing.T) {
	t.Parallel()
	set := func(names ...string) leadership {
		var s []schedule
		for _, n := range names {
			s = append(s, schedule{PeriodicTask: PeriodicTask{Name: n}})
		}
		return declaredJob(s)
	}
	ab, ba := set("a", "b"), set("b", "a")
	if ab != ba {
		t.Errorf("the same names in another order: %+v and %+v", ab, ba)
	}
	others := []leadership{set("a"), set("ab"), set("a", "b", "c"), set("a\x00b")}
	for _, o := range others {
		if o.job == ab.job || o.name == ab.name {
			t.Errorf("%+v and %+v: two sets, one election", o, ab)
		}
	}
	for _, l := range append(others, ab) {
		if l.job < leaderJobDeclared || l.job >= 1<<31 || l.name == schedulerJob.name || l.name == rescuerJob.name {
			t.Errorf("%+v: job outside [2^30, 2^31) or a fixed job's name", l)
		}
	}
}
