package store

import (
	"fmt"
	"time"

	"github.com/txoutbox/outbox"
)

// HistoryStatuses are the statuses an event leaves the hot table in for
// the history: it is finished and no operator action applies to it any
// more but a requeue of EXPIRED (which the history gives up: an EXPIRED
// event in history can no longer be requeued). FAILED stays in the hot
// table: it holds its aggregate back and waits for an operator.
var HistoryStatuses = []outbox.Status{outbox.StatusProcessed, outbox.StatusExpired, outbox.StatusSkipped}

// HistoryMoveRequest moves finished events, with their attempts, from the
// hot table into the history.
type HistoryMoveRequest struct {
	// OlderThan: only events that finished at least this long ago (by
	// the database clock) move. While an event is in the hot table, an
	// enqueue of its event id again is a no-op; once it moved, the same id
	// is a new event. OlderThan is that window.
	OlderThan time.Duration
	// BatchSize events per transaction; 0 means 1000.
	BatchSize int
	// Adopted also moves, on a table that outbox adopted (outbox migrate
	// --adopt), the rows that finished before the adoption. They are
	// kept in the hot table by default, as a purge keeps them.
	Adopted bool
	// Progress, when set, is called after each batch with the total moved
	// so far.
	Progress func(moved int64)
}

// Normalize validates r and fills its defaults.
func (r HistoryMoveRequest) Normalize() (HistoryMoveRequest, error) {
	if r.OlderThan < 0 {
		return r, fmt.Errorf("%w: the age of the events to move into history must not be negative", outbox.ErrInvalidConfig)
	}
	if r.BatchSize <= 0 {
		r.BatchSize = 1000
	}
	return r, nil
}

// HistoryMonth is one month of history: the events that finished in it
// and their attempts.
type HistoryMonth struct {
	// Month is the first instant of the month, in UTC.
	Month time.Time
	// Events and Attempts count its rows; Estimated says they are the
	// planner's estimates (PostgreSQL's pg_class) rather than counts.
	Events, Attempts int64
	Estimated        bool
}

// End returns the first instant after the month.
func (m HistoryMonth) End() time.Time { return m.Month.AddDate(0, 1, 0) }

// Label returns the month as YYYY-MM.
func (m HistoryMonth) Label() string { return m.Month.Format("2006-01") }

// HistoryDrop is what Store.DropHistoryBefore dropped: whole months,
// each with the rows it held, counted before the drop.
type HistoryDrop struct {
	Cutoff time.Time
	Months []HistoryMonth
}

// Events returns the events dropped.
func (d HistoryDrop) Events() int64 {
	var n int64
	for _, m := range d.Months {
		n += m.Events
	}
	return n
}

// MonthStart returns the first instant of t's month, in UTC.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// MonthsBefore returns the months of ms that end at or before cutoff:
// those a retention with that cutoff drops (a month that ends after it
// holds events younger than the retention and is kept whole).
func MonthsBefore(ms []HistoryMonth, cutoff time.Time) []HistoryMonth {
	var out []HistoryMonth
	for _, m := range ms {
		if !m.End().After(cutoff) {
			out = append(out, m)
		}
	}
	return out
}

// RetentionCutoff returns the cutoff of a retention that keeps keepDays
// days of history before now, refusing a retention below one day.
func RetentionCutoff(now time.Time, keepDays int) (time.Time, error) {
	if keepDays < 1 {
		return time.Time{}, fmt.Errorf("%w: history retention keeps at least 1 day (got %d)", outbox.ErrInvalidConfig, keepDays)
	}
	return now.AddDate(0, 0, -keepDays), nil
}
