package store

import (
	"fmt"

	"github.com/txoutbox/outbox"
)

// Normalize validates r and fills its defaults: Statuses PROCESSED and
// EXPIRED when it names none, BatchSize 1000 when it is not positive. A
// status that is not final, or a negative retention, is refused with
// outbox.ErrInvalidConfig.
func (r PurgeRequest) Normalize() (PurgeRequest, error) {
	if len(r.Statuses) == 0 {
		r.Statuses = []outbox.Status{outbox.StatusProcessed, outbox.StatusExpired}
	}
	for _, st := range r.Statuses {
		if !st.Final() {
			return PurgeRequest{}, fmt.Errorf("%w: purge applies to final statuses only, not %s", outbox.ErrInvalidConfig, st)
		}
	}
	if r.OlderThan < 0 {
		return PurgeRequest{}, fmt.Errorf("%w: purge retention must not be negative", outbox.ErrInvalidConfig)
	}
	if r.BatchSize <= 0 {
		r.BatchSize = 1000
	}
	return r, nil
}

// StatusNames returns the names of ss, in order.
func StatusNames(ss []outbox.Status) []string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return names
}

// PurgePage is what one page of a purge found and did.
type PurgePage struct {
	// Deleted counts the events the page deleted.
	Deleted int64
	// Last is the page's highest id; 0 when the page was empty.
	Last int64
	// Old counts the page's rows created before the retention cutoff,
	// purgeable or not.
	Old int64
}

// PurgePages runs a purge page by page in id order and returns how many
// events it deleted. page(after) handles the next page, the rows with id >
// after (0 for the first page). The walk stops at an empty page and at the
// first page whose rows are all younger than the retention, so a purge with
// nothing to do reads one page. An error ends the walk; it is returned as
// it is, with the events deleted so far.
func PurgePages(page func(after int64) (PurgePage, error)) (int64, error) {
	var total, cursor int64
	for {
		p, err := page(cursor)
		if err != nil {
			return total, err
		}
		total += p.Deleted
		if p.Last == 0 || p.Old == 0 {
			return total, nil
		}
		cursor = p.Last
	}
}
