package worker

import (
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/db"
)

// A claim reads the partial claim index in claim order (priority, run_at,
// id) and takes the first rows that are still pending. The entries of rows
// it already took stay in the index, pointing at dead row versions, until
// vacuum removes them, or until a later scan finds them dead to every
// transaction and marks them. While some transaction holds the xmin horizon
// back (a session idle in transaction, a long report), neither can happen:
// every claim from the head walks the entries of everything claimed since,
// a heap visit each, and its cost grows without bound (71,477 buffers and
// 509 ms to pick 250 rows after 100 s of a pinned horizon, against 209
// buffers and 9 ms clean).
//
// The same walk slows the drain of any large backlog, pinned horizon or
// not: the entries a scan marks dead are skipped without a heap visit, but
// their index pages are still read by every later claim from the head.
//
// So a claim loop keeps a cursor: the claim-order position of the last row
// it took. While a claim from the head is cheap (dead entries are few),
// every claim starts at the head. Once a claim from the head turns
// expensive, claims start a little before the cursor (cursorLookback, for
// rows of producer transactions that committed after the cursor passed
// their run_at). Rows can still land behind it: a higher priority, an old
// run_at of a rescued or handed-back task, a row passed over for its
// exclusive key, a late commit. So every max(headEvery, headRatio times
// what the last one cost), a probe looks for the first claimable row
// behind the cursor (TaskPendingBefore), on a pool connection, without
// locks: it walks the same dead entries a head claim would, but beside the
// claims rather than on the lock session, which a head claim held for
// its whole walk (every task that arrived meanwhile waited for it: under a
// horizon pinned for minutes, seconds). The next claim starts at the row
// the probe found; a cheap probe means the head is cheap again. A row
// behind the cursor waits at most that long: an idle claim loop wakes
// itself when a probe is due (headDue), since no notification or poll may
// come for a row that landed behind the cursor, and a probe that finds one
// wakes its loop.
const (
	cursorLookback = 50 * time.Millisecond
	headEvery      = time.Second
	headRatio      = 20
	// A head claim is expensive past headBase plus headPerRow per row
	// claimed: 5.5 ms for 250 rows. A fresh backlog costs 2-3 ms per 250
	// rows from the head on a quiet machine, but each row claimed leaves
	// an entry behind at the head (marked dead by the scan that meets it,
	// then skipped, but still read: vacuum alone removes it), so working
	// one big backlog from the head costs more with every claim: 7.7 ms
	// on average over a 1,000,000-task backlog, and 27,028 tasks/s, where
	// this threshold gave 3.9 ms and 45,745 tasks/s (docs/PERFORMANCE.md).
	// A threshold of 50 ms never engaged the cursor for that.
	headBase   = 3 * time.Millisecond
	headPerRow = 10 * time.Microsecond
	// A probe is cheap (the head is cheap again) under probeCheap: it
	// takes one row, so it is a head claim's threshold without the rows.
	probeCheap = headBase
)

// claimPos is a position in claim order.
type claimPos struct {
	priority int16
	runAt    time.Time
	id       int64
}

func (a claimPos) less(b claimPos) bool {
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	if !a.runAt.Equal(b.runAt) {
		return a.runAt.Before(b.runAt)
	}
	return a.id < b.id
}

// claimCursor is one claim loop's cursor, for one queue and name filter.
type claimCursor struct {
	mu       sync.Mutex // the claim loop, and a test
	pos      claimPos
	valid    bool      // pos is the last row taken
	costly   bool      // the last head claim was expensive
	lastHead time.Time // when it ran, or the last probe
	headCost time.Duration
	probing  bool      // a probe runs
	rewind   *claimPos // the next claim starts here: a probe found a row behind the cursor
	// rewinding: the claim under way starts behind the cursor.
	rewinding bool
	carrying  bool // a carry (carryDue) runs
	// exact: pos is where a carry put the cursor, not a row a claim took;
	// claims start right after it, without the lookback (all of a run of
	// rows inserted by one transaction has one run_at, and the lookback
	// would take the whole run back in).
	exact bool
}

// claimCursors holds the cursors of a worker; its zero value is ready.
type claimCursors struct {
	mu sync.Mutex
	m  map[string]*claimCursor
}

func (cs *claimCursors) get(queueName string, only, skip []string) *claimCursor {
	key := queueName + "\x00" + strings.Join(only, "\x01") + "\x00" + strings.Join(skip, "\x01")
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m == nil {
		cs.m = map[string]*claimCursor{}
	}
	c := cs.m[key]
	if c == nil {
		c = &claimCursor{}
		cs.m[key] = c
	}
	return c
}

// bound sets where the next claim starts, and reports whether it starts at
// the head.
func (c *claimCursor) bound(p *db.TaskClaimParams, now time.Time) (head bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid || !c.costly {
		p.UseAfter = false
		return true
	}
	p.UseAfter = true
	if c.rewind != nil {
		// Just before the row the probe found.
		p.AfterPriority, p.AfterRunAt, p.AfterID = c.rewind.priority, c.rewind.runAt, c.rewind.id-1
		c.rewind, c.rewinding = nil, true
		return false
	}
	from := c.from()
	p.AfterPriority, p.AfterRunAt, p.AfterID = from.priority, from.runAt, from.id
	return false
}

// from is where claims from the cursor start (after it), and before which
// a probe looks: the cursor less the lookback, or, carried, the cursor.
func (c *claimCursor) from() claimPos {
	if c.exact {
		return c.pos
	}
	return claimPos{priority: c.pos.priority, runAt: c.pos.runAt.Add(-cursorLookback)}
}

// probeDue reports whether a probe behind the cursor is due, and if so
// marks it running and returns where it looks before: the cursor, less the
// lookback its claims cover.
func (c *claimCursor) probeDue(now time.Time) (before claimPos, due bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid || !c.costly || c.probing || now.Sub(c.lastHead) < max(headEvery, headRatio*c.headCost) {
		return claimPos{}, false
	}
	c.probing = true
	return c.from(), true
}

// probed records a probe's outcome: when it started, what it cost, and the
// row it found behind the cursor, if any; a failed probe is tried again
// when the next one is due. It reports whether the next claim starts at a
// row behind the cursor.
func (c *claimCursor) probed(started time.Time, took time.Duration, found *claimPos, failed bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probing = false
	c.lastHead = started
	if failed {
		return false
	}
	c.headCost = took
	if took < probeCheap {
		c.costly = false // the head is cheap again: claims start there
	}
	if found == nil || !c.costly {
		return found != nil
	}
	c.rewind = found
	return true
}

// A claim takes only the names its worker handles, and a run of rows of
// other names at the head of the queue (a producer deployed before the
// workers that handle its new name, say) is walked by every claim from the
// head, a heap visit per row, for nothing. A claim that took rows leaves
// the cursor past them; a claim from the head that took none, and was
// expensive, leaves it nowhere. So, when the worker has seen names it does
// not handle in the queue (unhandled.go), such a claim carries the cursor
// to the last due row of the queue (TaskPendingLast, on a pool
// connection): the next claims start there, and the rows behind it,
// handled ones that sort among the others included, are the probe's to
// find, as for any cursor.

// carryDue reports whether a carry is due after a claim from the head that
// took no row, and if so marks it running.
func (c *claimCursor) carryDue() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.valid || !c.costly || c.carrying {
		return false
	}
	c.carrying = true
	return true
}

// carried records where a carry found the last due row, if it found one.
func (c *claimCursor) carried(last *claimPos) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.carrying = false
	if last != nil && !c.valid && c.costly {
		c.pos, c.valid, c.exact = *last, true, true
	}
}

// headDue reports, for a cursor in use, how long until its next probe is
// due.
func (c *claimCursor) headDue(now time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid || !c.costly {
		return 0, false
	}
	return max(0, c.lastHead.Add(max(headEvery, headRatio*c.headCost)).Sub(now)), true
}

// headDue is the soonest probe due among the cursors of queueName.
func (cs *claimCursors) headDue(queueName string, now time.Time) (time.Duration, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var soonest time.Duration
	found := false
	for key, c := range cs.m {
		if !strings.HasPrefix(key, queueName+"\x00") {
			continue
		}
		if d, ok := c.headDue(now); ok && (!found || d < soonest) {
			soonest, found = d, true
		}
	}
	return soonest, found
}

// claimed records a claim's outcome: from the head or not, how long it
// took, and the rows it took.
func (c *claimCursor) claimed(head bool, started time.Time, took time.Duration, rows []db.TaskClaimRow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if head {
		c.lastHead = started
		c.headCost = took
		c.costly = took > headBase+time.Duration(len(rows))*headPerRow
		if len(rows) > 0 {
			c.valid = false // the head is the truth: restart from what it took
		}
	}
	var last claimPos
	for i, r := range rows {
		pos := claimPos{priority: r.Priority, runAt: r.RunAt, id: r.ID}
		if i == 0 || last.less(pos) {
			last = pos
		}
		if !c.valid || c.pos.less(pos) {
			c.pos, c.valid, c.exact = pos, true, false
		}
	}
	if c.rewinding {
		// A claim from behind the cursor that took rows there: the next
		// starts after the last of them, until the rows behind run out.
		c.rewinding = false
		if len(rows) > 0 && last.less(c.pos) && c.costly {
			c.rewind = &claimPos{priority: last.priority, runAt: last.runAt, id: last.id + 1}
		}
	}
}
