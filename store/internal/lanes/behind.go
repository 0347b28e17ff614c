package lanes

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// The safety net behind the cursors (PostgreSQL).
//
// A lane's cursor passes only ids the horizon settled, and the horizon
// trusts one invariant: ids are drawn in the order of the transactions
// that draw them (a sequence without a cache, counting up). Migrate and
// the relay's start refuse a sequence that breaks it, and a claim read
// that finds it broken stops trusting the horizon. Whatever else breaks it
// would leave a committed event PENDING below its lane's cursor, where no
// read looks: so every LookBehindInterval a relay reads its lanes behind
// their cursors, and every PENDING row of hold 0 it finds there is given
// hold 1, where the claim reads it by its due time (in id order within
// its aggregate, like a retried event), logged as an ERROR and counted.

// LookBehindInterval is how often a relay reads its lanes behind their
// cursors: an event passed by a cursor reaches a claim within about one
// interval more.
const LookBehindInterval = 15 * time.Second

// Each pass reads, per lane, the rows of hold 0 that the cursor passed in
// the last RecentWindow, RecentRows of them at most counting down from
// the cursor (where a late commit lands: its id was drawn shortly before
// the ids the cursor passed), and SweepRows more from where the lane's
// last pass stopped, from the lane's first id up to its cursor and then
// again from the start, so that a row passed long ago is found too. An
// event that becomes visible within RecentWindow of its lane's cursor
// passing its id (and fewer than RecentRows rows behind it) reaches a
// claim within one LookBehindInterval; one further behind, when the sweep
// comes to it.
const (
	RecentWindow = time.Minute
	RecentRows   = 4096
	SweepRows    = 1024
)

// seenCursor is a lane's cursor at a pass of the safety net.
type seenCursor struct {
	at     time.Time
	cursor int64
}

// recentFrom records the lane's cursor at a pass at now and returns the
// lowest id the pass's recent read goes down to: the cursor the lane had
// RecentWindow ago, so that a quiet lane is not read again far behind;
// 0 (RecentRows below the cursor) in the lane's first RecentWindow.
func (rs *relayState) recentFrom(lane int, cursor int64, now time.Time) int64 {
	seen, known := rs.cursorsSeen[lane]
	if !known {
		// The rows the cursor passed before the lane's first pass (at
		// the claims since the lane was taken) are not known: the recent
		// read goes RecentRows below the cursor for a RecentWindow.
		seen = []seenCursor{{at: now, cursor: 0}}
	}
	if seen[len(seen)-1].cursor != cursor {
		seen = append(seen, seenCursor{at: now, cursor: cursor})
	}
	// Keep the newest entry at least RecentWindow old: the cursor then.
	drop := 0
	for drop+1 < len(seen) && !seen[drop+1].at.After(now.Add(-RecentWindow)) {
		drop++
	}
	seen = seen[drop:]
	rs.cursorsSeen[lane] = seen
	if seen[0].cursor > cursor {
		return 0 // a cursor set back: RecentRows below it
	}
	return seen[0].cursor
}

// BehindScanner is implemented by a backend whose lanes read from cursors.
type BehindScanner interface {
	// ScanBehind reads each lane of scans behind its cursor, gives every
	// PENDING row of hold 0 it finds there hold 1 (and a lane to a PENDING
	// row that has none, written past the insert trigger), and returns
	// those rows and how far each lane's sweep got.
	ScanBehind(ctx context.Context, scans []BehindScan) (BehindResult, error)
}

// BehindScan is one lane of a pass.
type BehindScan struct {
	Lane int
	// Cursor is the lane's cursor; the pass reads only below it.
	Cursor int64
	// RecentFrom is the lowest id the recent read goes down to (0: the
	// RecentRows rows below the cursor, whichever they are).
	RecentFrom int64
	// SweepFrom is the id the sweep goes on from.
	SweepFrom int64
}

// PassedRow is a PENDING row found behind its lane's cursor.
type PassedRow struct {
	Lane    int
	ID      int64
	EventID string
}

// BehindResult is what a pass found.
type BehindResult struct {
	// Passed are the rows given hold 1, in id order.
	Passed []PassedRow
	// SweepEnd maps each lane whose sweep read SweepRows rows to the last
	// id it read; a lane missing from it reached its cursor.
	SweepEnd map[int]int64
	// Problem, when set, says which setting of the database draws ids out
	// of order now, and what to change.
	Problem error
}

// SetSafetyNet sets the logger of the safety net's findings and how often
// it runs (LookBehindInterval when every is 0; negative: never, for tests
// that count a horizon's reads).
func (c *Claimer) SetSafetyNet(log *slog.Logger, every time.Duration) {
	c.netLog = log
	if every == 0 {
		every = LookBehindInterval
	}
	c.netEvery = every
}

// FoundBehindCursors counts the events the safety net found behind the
// lanes' cursors since the claimer was made.
func (c *Claimer) FoundBehindCursors() int64 { return c.netFound.Load() }

// lookBehind runs a pass over the relay's lanes when one is due. rs.mu
// must be held. A failed pass is logged and tried again at the next claim:
// the claim itself does not depend on it.
func (c *Claimer) lookBehind(ctx context.Context, rs *relayState) {
	bs, ok := c.b.(BehindScanner)
	if !ok || c.netEvery < 0 || len(rs.held) == 0 {
		return
	}
	now := c.now()
	if !rs.lookedBehind.IsZero() && now.Sub(rs.lookedBehind) < c.netEvery {
		return
	}
	rs.lookedBehind = now
	var scans []BehindScan
	for _, l := range sortedLanes(rs.held) {
		h := rs.held[l]
		if h.cursor <= 0 {
			continue // the lane reads from its start: nothing is behind
		}
		scans = append(scans, BehindScan{Lane: l, Cursor: h.cursor, RecentFrom: rs.recentFrom(l, h.cursor, now), SweepFrom: rs.sweptTo[l]})
	}
	for l := range rs.cursorsSeen {
		if _, ok := rs.held[l]; !ok {
			delete(rs.cursorsSeen, l) // a lane given away: its history goes with it
		}
	}
	if len(scans) == 0 {
		return
	}
	res, err := bs.ScanBehind(ctx, scans)
	if err != nil {
		if ctx.Err() == nil {
			c.logger().Warn("outbox: reading the lanes behind their cursors failed; tried again at a later claim", "err", err)
		}
		return
	}
	if res.Problem != nil {
		c.logger().Error("outbox: the outbox's ids are drawn out of the order of their transactions: "+
			"the lanes' cursors stay where they are (each claim reads the events after them again, slower) "+
			"and the safety net delivers what they passed; fix the setting", "problem", res.Problem)
	}
	for _, s := range scans {
		if end, more := res.SweepEnd[s.Lane]; more {
			rs.sweptTo[s.Lane] = end + 1
		} else {
			delete(rs.sweptTo, s.Lane) // the sweep reached the cursor: from the start next time
		}
	}
	if len(res.Passed) == 0 {
		return
	}
	c.netFound.Add(int64(len(res.Passed)))
	ids := make([]int64, 0, len(res.Passed))
	eventIDs := make([]string, 0, len(res.Passed))
	for _, p := range res.Passed {
		ids = append(ids, p.ID)
		eventIDs = append(eventIDs, p.EventID)
	}
	slices.Sort(ids)
	const shown = 50
	c.logger().Error("outbox: committed events were found behind their lane's cursor, where no claim read them; "+
		"they are delivered now (in order within their aggregates, after the events already delivered). "+
		"Ids were drawn out of the order of their transactions: check the outbox id sequence (CACHE 1, counting up) "+
		"and that every insert goes through the outbox's insert trigger",
		"count", len(ids), "ids", firstN(ids, shown), "event_ids", firstN(eventIDs, shown))
}

func (c *Claimer) logger() *slog.Logger {
	if c.netLog != nil {
		return c.netLog
	}
	return slog.Default()
}

// firstN is s, or its first n elements and a note of how many more.
func firstN[T any](s []T, n int) any {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%v and %d more", s[:n], len(s)-n)
}
