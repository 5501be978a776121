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
		t.Fatalf("head claim due in %v (%v), want 10s", d, ok)
	}
	if c.bound(&p, t0.Add(39*time.Second)) {
		t.Fatal("a head claim came before headRatio times the last one's cost")
	}
	if !c.bound(&p, t0.Add(40*time.Second)) || p.UseAfter {
		t.Fatal("no head claim after headRatio times the last one's cost")
	}
	// A cheap head claim ends cursor mode; one that takes rows from behind
	// the cursor moves it back to them.
	c.claimed(true, t0.Add(40*time.Second), time.Millisecond, []db.TaskClaimRow{row(-1, t0, 2)})
	if c.costly || c.pos != (claimPos{-1, t0, 2}) {
		t.Fatalf("after a cheap head claim: costly %v, cursor at %+v", c.costly, c.pos)
	}
	if _, ok := c.headDue(t0.Add(41 * time.Second)); ok {
		t.Fatal("a head claim is due for a cursor not in use")
	}
}
