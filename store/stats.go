package store

import "github.com/txoutbox/outbox"

// NewStats returns a Stats whose Counts hold every status at 0, so that a
// status without events is reported as 0 rather than left out.
func NewStats() Stats {
	st := Stats{Counts: make(map[outbox.Status]int64, len(outbox.Statuses))}
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
