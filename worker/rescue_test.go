package worker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	b.waitTaskLocksGone(t)

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
		`msg="skiplock: this worker's lock session was lost (a server restart, a failover or a network cut); its running tasks were returned to the queue" worker_id=w-self returned_to_queue=2`,
		`msg="skiplock: rescued tasks whose worker is gone (its process died, or lost its session and is not back yet); each runs alone next, one at a time" lost_worker=w-other count=1 quarantined=0`,
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

// TestRescueSweep: once a pass over every task is slow, passes look at
// spans of ids that together cover every id up to the highest there was,
// with no gap, each sized to take about sweepTarget; once a whole sweep is
// cheap, passes look at every task again.
func TestRescueSweep(t *testing.T) {
	ms := time.Millisecond
	var s rescueSweep
	top := func(high int64) func() (int64, error) { return func() (int64, error) { return high, nil } }
	none := func() time.Duration { return 0 }
	if from, to := s.next(); from != 0 || to != math.MaxInt64 {
		t.Fatalf("a new sweep looks at [%d, %d), want every id", from, to)
	}
	if s.passed(0, math.MaxInt64, 50*ms, top(99_999), none) || s.on {
		t.Fatal("a pass of 50 ms began a sweep")
	}
	if s.passed(0, math.MaxInt64, time.Second, func() (int64, error) { return 0, errors.New("gone") }, none) || s.on {
		t.Fatal("a sweep began without the highest id")
	}
	if !s.passed(0, math.MaxInt64, time.Second, top(99_999), none) {
		t.Fatal("a pass of 1 s began no sweep")
	}
	// A whole pass took 1 s: a tenth of the ids for 100 ms.
	if from, to := s.next(); from != 0 || to != 10_000 {
		t.Fatalf("the first span is [%d, %d), want [0, 10000)", from, to)
	}
	// Spans follow one another to the end, each at most twice or half the
	// last: 400 ms for the first halves the second, 10 ms doubles.
	costs := []time.Duration{400 * ms, 10 * ms}
	var spans [][2]int64
	next := int64(0)
	for i := 0; s.on && i < 100; i++ {
		from, to := s.next()
		if from != next {
			t.Fatalf("span %d starts at %d, want %d: a gap or an overlap", i, from, next)
		}
		spans = append(spans, [2]int64{from, to})
		took := 60 * ms
		if i < len(costs) {
			took = costs[i]
		}
		next = to
		s.passed(from, to, took, top(149_999), none)
		if s.from == 0 {
			break // the sweep ended, and another began
		}
	}
	if len(spans) < 3 || spans[1] != [2]int64{10_000, 15_000} || spans[2] != [2]int64{15_000, 25_000} {
		t.Fatalf("spans %v: want [10000 15000] after 400 ms, then [15000 25000] after 10 ms", spans)
	}
	if last := spans[len(spans)-1]; last[1] != 100_000 {
		t.Fatalf("the sweep ended at %d, want 100000 (the highest id when it began, plus one)", last[1])
	}
	// The sweep cost more than sweepAbove: another, to the highest id now.
	if !s.on || s.from != 0 || s.to != 150_000 {
		t.Fatalf("after a costly sweep: %+v, want another sweep to 150000", s)
	}
	for i := 0; s.on && i < 1000; i++ {
		from, to := s.next()
		s.passed(from, to, ms, top(149_999), none)
	}
	if s.on {
		t.Fatal("a sweep whose spans took 1 ms never ended")
	}
	if from, to := s.next(); from != 0 || to != math.MaxInt64 {
		t.Fatalf("after a cheap sweep the next pass looks at [%d, %d), want every id", from, to)
	}

	// A cost that spans do not divide (a large lock table to read): no
	// sweep begins, nor does one until a pass over every task costs twice
	// as much.
	s = rescueSweep{}
	fixed := func() time.Duration { return 280 * ms }
	if s.passed(0, math.MaxInt64, 300*ms, top(599_999), fixed) || s.on {
		t.Fatal("a sweep began where spans would all cost 280 ms of 300")
	}
	if s.passed(0, math.MaxInt64, 500*ms, top(599_999), fixed) || s.on {
		t.Fatal("a sweep began again before a pass over every task cost twice the last")
	}
	if !s.passed(0, math.MaxInt64, 700*ms, top(599_999), fixed) {
		t.Fatal("no sweep began once a pass over every task cost twice the last, mostly in what spans divide")
	}
}

// TestRescueRange: a pass over a span of ids rescues the orphans in it and
// no other.
func TestRescueRange(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	g := newGuard(b.deps(t, "w-gone", ModeAdvisory, nil, nil))
	if err := g.open(context.Background(), b.schema.TableOID, &outage{log: b.log, what: "test"}); err != nil {
		t.Fatal(err)
	}
	rows := b.claim(t, g, "w-gone", 3)
	g.close()
	b.waitTaskLocksGone(t)
	ids := []int64{rows[0].ID, rows[1].ID, rows[2].ID}
	slices.Sort(ids)
	work, _ := schema.Channels(b.schema.Name)
	r := &rescuer{
		queries: b.queries, pool: b.pool, classOID: b.schema.TableOID, channel: work,
		beforeRescue: func(context.Context) {}, observer: NopObserver{}, mode: ModeAdvisory,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ctx := context.Background()
	for i, span := range [][2]int64{{0, ids[0]}, {ids[0], ids[1]}, {ids[1], ids[2]}, {ids[2], math.MaxInt64}} {
		n := r.rescueRange(ctx, span[0], span[1])
		want := 1
		if i == 0 {
			want = 0 // below every id
		}
		if n != want {
			t.Fatalf("the pass over [%d, %d) rescued %d, want %d", span[0], span[1], n, want)
		}
		for j, id := range ids {
			wantStatus := "running"
			if j < i {
				wantStatus = "pending"
			}
			if got := b.status(t, id); got != wantStatus {
				t.Fatalf("after the pass over [%d, %d), task %d is %s, want %s", span[0], span[1], id, got, wantStatus)
			}
		}
	}
}

// waitTaskLocksGone waits until no session holds a task lock of the
// schema: a closed connection's backend exits, and its locks go, a moment
// after the client has hung up.
func (b *jobsBundle) waitTaskLocksGone(t *testing.T) {
	t.Helper()
	pgtest.Eventually(t, 10*time.Second, "the closed sessions' task locks to go", func() bool {
		var n int
		err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::bigint::oid`, b.schema.TableOID).Scan(&n)
		return err == nil && n == 0
	})
}

// waitLockSessionGone waits until worker id's lock session has left
// pg_stat_activity: a backend releases its locks before its entry there
// goes, and the rescue reads a worker whose session is still listed as
// alive.
func (b *jobsBundle) waitLockSessionGone(t *testing.T, id string) {
	t.Helper()
	pgtest.Eventually(t, 10*time.Second, "worker "+id+"'s lock session to leave pg_stat_activity", func() bool {
		var listed bool
		err := b.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity AS a
			JOIN skiplock_workers AS w ON a.pid = w.lock_backend_pid WHERE w.id = $1)`, id).Scan(&listed)
		return err == nil && !listed
	})
}

// TestRescuerNewTermPassesAtOnce: a rescuer whose pass outlived its
// leadership (it hung on a cut network: w1's session ended on the server,
// w2 took the election and then died) leads again in its new session at
// its next tick, with no tick in between that found it not leading; that
// first tick of the new term passes, and rescues, however slow the pass of
// the old term was. Before, the old pass's length (rescueRatio times it)
// held off every pass while its election kept every other worker from
// rescuing.
func TestRescuerNewTermPassesAtOnce(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	g1 := b.openAdvisory(t, b.deps(t, "w1", ModeAdvisory, nil, nil))
	g2 := b.openAdvisory(t, b.deps(t, "w2", ModeAdvisory, nil, nil))
	e1, e2 := newElector(rescuerJob, g1, b.log, "w1"), newElector(rescuerJob, g2, b.log, "w2")
	work, _ := schema.Channels(b.schema.Name)
	passes := 0
	r1 := &rescuer{
		elector: e1, queries: b.queries, pool: b.pool, classOID: b.schema.TableOID, channel: work, interval: time.Second,
		beforeRescue: g1.beforeRescue, observer: NopObserver{}, self: "w1", mode: ModeAdvisory, log: b.log,
		passed: func() { passes++ },
	}
	var st rescueState
	r1.tick(ctx, &st)
	if passes != 1 || !e1.isLeader() {
		t.Fatalf("first tick: %d passes, leads %v; want a pass as leader", passes, e1.isLeader())
	}
	// The pass that hung: an hour, rescuing nothing.
	st.pace.passed(time.Now(), time.Hour, 0)
	term := e1.term()

	// Meanwhile w1's session ended on the server; w2 took the election.
	b.exec(t, "SELECT pg_terminate_backend($1)", b.lockBackend(t, "w1"))
	pgtest.Eventually(t, time.Second, "w2 leading", func() bool { return e2.lead(ctx) })
	if err := g1.ls.ping(0, nil); !errors.Is(err, errSessionDown) {
		t.Fatalf("ping of the ended session: %v, want errSessionDown", err)
	}
	pgtest.Eventually(t, time.Second, "w1's session back", func() bool {
		gen, up := g1.ls.generation()
		return up && gen == 2
	})
	// Then w2 died, with a task running.
	orphan := b.claim(t, g2, "w2", 1)[0].ID
	g2.close()
	b.waitTaskLocksGone(t)
	pgtest.Eventually(t, time.Second, "w2's election lock gone", func() bool { return len(b.leaderBackends(t, leaderJobRescuer)) == 0 })

	r1.tick(ctx, &st)
	if !e1.isLeader() || e1.term() == term {
		t.Fatalf("w1 leads %v in term %d (was %d); want a new term", e1.isLeader(), e1.term(), term)
	}
	if passes != 2 {
		t.Fatalf("the first tick of a new term made no pass (%d passes): the old term's slow pass held it off", passes)
	}
	if s := b.status(t, orphan); s != "pending" {
		t.Fatalf("w2's task is %s after the new leader's first tick, want pending (rescued)", s)
	}
}

// TestLeaseElectorTerms: renewing a lease keeps the term; a renewal more
// than the lease's TTL after the last (a pass that outlived it, while
// another worker may have led) begins a new one, as does a leadership lost
// and taken again.
func TestLeaseElectorTerms(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	g1, g2 := newGuard(b.deps(t, "w1", ModeLease, nil, nil)), newGuard(b.deps(t, "w2", ModeLease, nil, nil))
	e1, e2 := newElector(rescuerJob, g1, b.log, "w1"), newElector(rescuerJob, g2, b.log, "w2")
	if !e1.lead(ctx) || !e1.lead(ctx) {
		t.Fatal("w1 does not lead")
	}
	first := e1.term()
	e1.l.renewed = e1.l.renewed.Add(-time.Hour)
	if !e1.lead(ctx) || e1.term() == first {
		t.Fatalf("a renewal an hour after the last: term %d, want a new one after %d", e1.term(), first)
	}
	second := e1.term()
	g1.resign(electedJobs)
	if !e2.lead(ctx) || e1.lead(ctx) {
		t.Fatal("w2 did not take over after w1 resigned")
	}
	g2.resign(electedJobs)
	if !e1.lead(ctx) || e1.term() == second {
		t.Fatalf("w1 leading again: term %d, want a new one after %d", e1.term(), second)
	}
}

// cutAfterRescue is a query tracer that cuts its connection once a
// rescue's rows have come back, before anything else is sent on it: the
// rescuer's process died there.
type cutAfterRescue struct{ cut atomic.Int64 }

func (c *cutAfterRescue) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c *cutAfterRescue) TraceQueryEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.Err == nil && strings.HasPrefix(d.CommandTag.String(), "UPDATE") {
		c.cut.Add(1)
		conn.PgConn().Conn().Close()
	}
}

// TestRescueDiesWithItsProcess: a rescue whose process dies before it has
// read the rescue's rows (a worker killed by its own task while its
// rescuer's statement runs) rescues nothing: it counted no death for the
// rescuer's own tasks, whose locks went with that process's lock session,
// and committed, it would have returned a task that killed its process as
// if that process lived. The next rescue, by another worker, counts the
// death.
func TestRescueDiesWithItsProcess(t *testing.T) {
	t.Parallel()
	b := setupJobs(t)
	ctx := context.Background()
	g := b.openAdvisory(t, b.deps(t, "w-dead", ModeAdvisory, nil, nil))
	task := b.claim(t, g, "w-dead", 1)[0]
	g.close()
	b.waitTaskLocksGone(t)
	b.waitLockSessionGone(t, "w-dead")

	work, _ := schema.Channels(b.schema.Name)
	cfg := b.pool.Config()
	tracer := &cutAfterRescue{}
	cfg.ConnConfig.Tracer = tracer
	dying := pgtest.PoolFromConfig(t, cfg)
	r := &rescuer{
		queries: b.queries, pool: dying, classOID: b.schema.TableOID, channel: work,
		beforeRescue: func(context.Context) {}, observer: NopObserver{}, self: "w-dead", mode: ModeAdvisory, log: b.log,
	}
	if n := r.rescue(ctx); n != 0 || tracer.cut.Load() != 1 {
		t.Fatalf("the dying rescue returned %d tasks after %d cuts, want none after one", n, tracer.cut.Load())
	}
	if s := b.status(t, task.ID); s != "running" {
		t.Fatalf("after the dying rescue the task is %s, want running: its rescue committed without its process", s)
	}
	other := &rescuer{
		queries: b.queries, pool: b.pool, classOID: b.schema.TableOID, channel: work,
		beforeRescue: func(context.Context) {}, observer: NopObserver{}, self: "w-other", mode: ModeAdvisory, log: b.log,
	}
	if n := other.rescue(ctx); n != 1 {
		t.Fatalf("another worker's rescue returned %d tasks, want 1", n)
	}
	var crashes int
	var crash *bool
	if err := b.pool.QueryRow(ctx, `SELECT crashes, (errors -> -1 ->> 'crash')::boolean FROM skiplock_tasks WHERE id = $1`,
		task.ID).Scan(&crashes, &crash); err != nil {
		t.Fatal(err)
	}
	if crashes != 1 || crash == nil || !*crash {
		t.Fatalf("the task's crashes %d, its rescue's crash %v; want 1 and true: its worker died", crashes, crash)
	}
}
