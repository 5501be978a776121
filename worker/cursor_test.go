package worker

import (
	"testing"
	"time"

	"github.com/skiplock/skiplock/db"
)

func TestClaimCursorPolicy(t *testing.T) {
	var c claimCursor
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var p db.TaskClaimParams
	if !c.bound(&p, t0) || p.UseAfter {
		t.Fatal("a new cursor must claim from the head")
	}
	row := func(prio int16, at time.Time, id int64) db.TaskClaimRow {
		return db.TaskClaimRow{ID: id, Priority: prio, RunAt: at}
	}
	// A cheap head claim: the next one is from the head too.
	c.claimed(true, t0, time.Millisecond, []db.TaskClaimRow{row(0, t0, 7), row(0, t0.Add(time.Second), 3), row(0, t0, 9)})
	if !c.bound(&p, t0.Add(time.Millisecond)) || p.UseAfter {
		t.Fatal("after a cheap head claim, the next claim must start at the head")
	}
	if c.pos != (claimPos{0, t0.Add(time.Second), 3}) {
		t.Fatalf("cursor at %+v, want the last row in claim order", c.pos)
	}
	// An expensive one (2 s for 3 rows): claims start at the cursor, less
	// the lookback, until max(headEvery, headRatio x 2 s) has passed.
	c.claimed(true, t0, 2*time.Second, []db.TaskClaimRow{row(0, t0.Add(2*time.Second), 11)})
	if c.bound(&p, t0.Add(time.Second)) || !p.UseAfter || p.AfterPriority != 0 ||
		!p.AfterRunAt.Equal(t0.Add(2*time.Second-cursorLookback)) || p.AfterID != 0 {
		t.Fatalf("after an expensive head claim: %+v", p)
	}
	// Cursor claims only move it forward.
	c.claimed(false, t0.Add(time.Second), time.Millisecond, []db.TaskClaimRow{row(0, t0.Add(3*time.Second), 12), row(0, t0, 1)})
	if c.pos != (claimPos{0, t0.Add(3 * time.Second), 12}) {
		t.Fatalf("cursor at %+v after a cursor claim", c.pos)
	}
	if d, ok := c.headDue(t0.Add(30 * time.Second)); !ok || d != 10*time.Second {
		t.Fatalf("probe due in %v (%v), want 10s", d, ok)
	}
	// While the head is expensive, claims never start there: a probe looks
	// behind the cursor instead, once max(headEvery, headRatio x the last
	// cost) has passed, one at a time.
	if _, due := c.probeDue(t0.Add(39 * time.Second)); due {
		t.Fatal("a probe came before headRatio times the last head claim's cost")
	}
	if c.bound(&p, t0.Add(40*time.Second)) || !p.UseAfter {
		t.Fatal("a claim started at the expensive head")
	}
	before, due := c.probeDue(t0.Add(40 * time.Second))
	if !due || before != (claimPos{0, t0.Add(3*time.Second - cursorLookback), 0}) {
		t.Fatalf("probe due %v, before %+v", due, before)
	}
	if _, again := c.probeDue(t0.Add(41 * time.Second)); again {
		t.Fatal("a second probe while one runs")
	}
	// An expensive probe that found a row behind the cursor: the next claim
	// starts just before it, and while such claims take rows from behind
	// the cursor, the one after starts after the last of them.
	if !c.probed(t0.Add(40*time.Second), time.Second, &claimPos{-1, t0, 2}, false) || !c.costly {
		t.Fatal("a probe's find must wake the claim loop and keep the cursor")
	}
	if c.bound(&p, t0.Add(41*time.Second)) || !p.UseAfter || p.AfterPriority != -1 || !p.AfterRunAt.Equal(t0) || p.AfterID != 1 {
		t.Fatalf("claim after a probe's find: %+v", p)
	}
	c.claimed(false, t0.Add(41*time.Second), time.Millisecond, []db.TaskClaimRow{row(-1, t0, 2), row(-1, t0, 5)})
	if c.bound(&p, t0.Add(41*time.Second)) || p.AfterPriority != -1 || !p.AfterRunAt.Equal(t0) || p.AfterID != 5 {
		t.Fatalf("second claim behind the cursor: %+v", p)
	}
	c.claimed(false, t0.Add(41*time.Second), time.Millisecond, nil)
	if c.bound(&p, t0.Add(41*time.Second)) || p.AfterPriority != 0 || !p.AfterRunAt.Equal(t0.Add(3*time.Second-cursorLookback)) {
		t.Fatalf("back at the cursor: %+v", p)
	}
	if c.pos != (claimPos{0, t0.Add(3 * time.Second), 12}) {
		t.Fatalf("claims behind the cursor moved it to %+v", c.pos)
	}
	// A failed probe changes nothing but its time; a cheap one ends cursor
	// mode.
	c.probeDue(t0.Add(80 * time.Second))
	if c.probed(t0.Add(80*time.Second), time.Microsecond, nil, true) || !c.costly {
		t.Fatal("a failed probe ended cursor mode")
	}
	c.probeDue(t0.Add(120 * time.Second))
	c.probed(t0.Add(120*time.Second), time.Millisecond, nil, false)
	if c.costly || !c.bound(&p, t0.Add(121*time.Second)) || p.UseAfter {
		t.Fatal("after a cheap probe, claims must start at the head")
	}
	if _, ok := c.headDue(t0.Add(121 * time.Second)); ok {
		t.Fatal("a probe is due for a cursor not in use")
	}
}

// TestClaimCursorCarry: an expensive claim from the head that took no row
// leaves the cursor nowhere; a carry then puts it at the last due row, and
// claims (and probes) start right after it, without the lookback, until a
// claim takes a row past it.
func TestClaimCursorCarry(t *testing.T) {
	var c claimCursor
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var p db.TaskClaimParams
	if c.carryDue() {
		t.Fatal("a carry is due before any expensive claim")
	}
	c.claimed(true, t0, time.Second, nil)
	if !c.bound(&p, t0) || p.UseAfter {
		t.Fatal("an expensive claim that took nothing must leave claims at the head")
	}
	if !c.carryDue() {
		t.Fatal("no carry due after an expensive claim from the head that took nothing")
	}
	if c.carryDue() {
		t.Fatal("a second carry is due while one runs")
	}
	tail := claimPos{priority: 0, runAt: t0, id: 5000}
	c.carried(&tail)
	if c.bound(&p, t0) || !p.UseAfter || p.AfterPriority != 0 || !p.AfterRunAt.Equal(t0) || p.AfterID != 5000 {
		t.Fatalf("after a carry, claims must start right after the last due row: %+v", p)
	}
	if c.carryDue() {
		t.Fatal("a carry is due while the cursor is in use")
	}
	before, due := c.probeDue(t0.Add(headRatio*time.Second + time.Second))
	if !due || before != tail {
		t.Fatalf("probe due %v before %+v, want before the carried row", due, before)
	}
	c.probed(t0.Add(headRatio*time.Second+time.Second), time.Second, nil, false)
	// A claim that takes a row past it: the cursor is that row, with the
	// lookback again.
	c.claimed(false, t0, time.Millisecond, []db.TaskClaimRow{{ID: 5001, Priority: 0, RunAt: t0.Add(time.Second)}})
	if c.bound(&p, t0) || p.AfterID != 0 || !p.AfterRunAt.Equal(t0.Add(time.Second-cursorLookback)) {
		t.Fatalf("after a claim past the carried row: %+v", p)
	}
	// A carry that found nothing leaves the cursor as it was.
	var d claimCursor
	d.claimed(true, t0, time.Second, nil)
	if !d.carryDue() {
		t.Fatal("no carry due")
	}
	d.carried(nil)
	if !d.bound(&p, t0) || p.UseAfter {
		t.Fatal("a carry that found no row must leave claims at the head")
	}
}

// After a claim that came back short, the next asks for twice what it took
// (at least minShortClaim); claims that fill up double the bound until the
// room the loop has binds instead, and then it goes.
func TestClaimSize(t *testing.T) {
	t.Parallel()
	var s claimSize
	steps := []struct {
		room, want, got int
	}{
		{500, 500, 500}, // no bound at first
		{500, 500, 1},   // short: asks for minShortClaim next
		{500, minShortClaim, 3},
		{500, minShortClaim, minShortClaim}, // full: doubles
		{500, 2 * minShortClaim, 2 * minShortClaim},
		{500, 4 * minShortClaim, 20}, // short: twice what it took
		{500, 40, 40},
		{60, 60, 60}, // the room bound it and it filled up: the bound goes
		{500, 500, 500},
		{500, 500, 0},
		{3, 3, 3}, // under the bound, full: the bound goes
		{500, 500, 500},
	}
	for i, st := range steps {
		if ask := s.ask(st.room); ask != st.want {
			t.Fatalf("step %d: asked for %d of %d free, want %d", i, ask, st.room, st.want)
		}
		s.claimed(st.want, st.got)
	}
}
