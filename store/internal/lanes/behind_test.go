package lanes

import (
	"testing"
	"time"
)

// The recent read of a lane goes down to the cursor the lane had
// RecentWindow ago: all of it at the first pass over a lane, nothing more
// on a lane whose cursor has not moved for RecentWindow, and all of it
// again after a cursor was set back.
func TestRecentFromIsTheCursorAMinuteAgo(t *testing.T) {
	rs := newRelayState()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		at     time.Duration
		cursor int64
		want   int64
		why    string
	}{
		{0, 100, 0, "a lane just taken: RecentRows below the cursor"},
		{15 * time.Second, 200, 0, "what the claims before the first pass passed is unknown for a minute"},
		{30 * time.Second, 300, 0, "still unknown, under a minute after the lane was taken"},
		{75 * time.Second, 400, 200, "the cursor a minute ago (the pass at 15 s)"},
		{130 * time.Second, 500, 300, "the cursor a minute ago (the pass at 30 s)"},
		{4 * time.Minute, 500, 500, "a lane quiet for a minute: nothing is read again"},
		{4*time.Minute + 15*time.Second, 50, 0, "a cursor set back: RecentRows below it"},
	}
	for _, s := range steps {
		if got := rs.recentFrom(7, s.cursor, at(s.at)); got != s.want {
			t.Errorf("at %s, cursor %d: recent read down to %d, want %d (%s)", s.at, s.cursor, got, s.want, s.why)
		}
	}
	if n := len(rs.cursorsSeen[7]); n > 3 {
		t.Errorf("%d cursors kept, want only the last minute's", n)
	}
}
