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

// Each pass reads, per lane, the last RecentRows rows of hold 0 below the
// cursor (where a late commit lands: its id was drawn shortly before the
// ids the cursor passed) and SweepRows more from where the lane's last
// pass stopped, from the lane's first id up to its cursor and then again
// from the start, so that a row passed long ago is found too.
const (
	RecentRows = 256
	SweepRows  = 1024
)

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
		scans = append(scans, BehindScan{Lane: l, Cursor: h.cursor, SweepFrom: rs.sweptTo[l]})
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
