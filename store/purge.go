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
