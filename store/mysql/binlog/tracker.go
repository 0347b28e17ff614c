package binlog

import "github.com/txoutbox/outbox/internal/cdctrack"

// tracker holds what the stream received and the relay has not finished,
// and computes the position that may be saved (cdctrack.Tracker). The
// binary log stream reports an idle position only between transactions,
// so it never calls Begin.
type tracker = cdctrack.Tracker[Position]

func newTracker(start Position) *tracker {
	return cdctrack.New(start, Position.after)
}
