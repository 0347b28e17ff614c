package cdc

import (
	"github.com/jackc/pglogrepl"

	"github.com/txoutbox/outbox/internal/cdctrack"
)

// tracker holds what the stream received and the relay has not finished,
// and computes the LSN the slot may be confirmed at (cdctrack.Tracker).
type tracker = cdctrack.Tracker[pglogrepl.LSN]

func newTracker(start pglogrepl.LSN) *tracker {
	return cdctrack.New(start, func(a, b pglogrepl.LSN) bool { return a > b })
}
