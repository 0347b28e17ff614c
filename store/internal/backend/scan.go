package backend

import (
	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// NewStats returns a Stats whose Counts hold every status at 0, so that a
// status without events is reported as 0 rather than left out.
func NewStats() store.Stats {
	st := store.Stats{Counts: make(map[outbox.Status]int64, len(outbox.Statuses))}
	for _, status := range outbox.Statuses {
		st.Counts[status] = 0
	}
	return st
}

// Rows is the part of *sql.Rows and pgx.Rows that the scanning helpers use.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanStatusCounts reads rows of (status, count), as a backend's
// "SELECT status, count(*) ... GROUP BY status" returns them, into counts,
// and returns the first error of Scan or rows.Err(). The caller closes
// rows.
func ScanStatusCounts(rows Rows, counts map[outbox.Status]int64) error {
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			return err
		}
		counts[outbox.Status(status)] = n
	}
	return rows.Err()
}

// NewSnapshot returns a Snapshot whose Counts hold 0 for every status the
// request counts.
func NewSnapshot(req store.SnapshotRequest) store.Snapshot {
	s := store.Snapshot{Counts: make(map[outbox.Status]int64, len(outbox.Statuses)), Full: req.Full}
	for _, st := range store.UnfinishedStatuses {
		s.Counts[st] = 0
	}
	if req.Full {
		for _, st := range store.FinalStatuses {
			s.Counts[st] = 0
		}
	}
	return s
}

// ScanBlockedAggregates reads the rows of a backend's blocked-aggregates
// query into snap, listing at most limit of them. scan reads the current
// row into b and the count of all blocked aggregates into total. The
// caller closes rows.
func ScanBlockedAggregates(rows Rows, limit int, snap *store.Snapshot, scan func(b *store.BlockedAggregate, total *int64) error) error {
	for rows.Next() {
		var b store.BlockedAggregate
		if err := scan(&b, &snap.BlockedAggregateCount); err != nil {
			return err
		}
		if len(snap.BlockedAggregates) < limit {
			snap.BlockedAggregates = append(snap.BlockedAggregates, b)
		}
	}
	return rows.Err()
}
