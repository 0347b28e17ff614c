package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/txoutbox/outbox"
)

// eventAtDestination is an event's delivery at one destination of a
// fan-out: its copy in the destination's table, if it has one.
type eventAtDestination struct {
	Name  string `json:"name"`
	Table string `json:"table"`
	// Status is the copy's status; null when the destination has no copy
	// (its route does not name it, or the event is not routed yet).
	Status     *outbox.Status `json:"status"`
	RetryCount int            `json:"retry_count,omitempty"`
	LastError  string         `json:"last_error,omitempty"`
	// Attempts are the copy's attempts at the destination.
	Attempts []attemptJSON `json:"attempts,omitempty"`
}

// StatusText is the copy's status, or "" without a copy (for the page).
func (e eventAtDestination) StatusText() string {
	if e.Status == nil {
		return ""
	}
	return string(*e.Status)
}

// atDestinations reads an event's copy at each configured destination.
// A destination whose table cannot be read says so in its LastError
// rather than failing the whole answer.
func (h *Handler) atDestinations(ctx context.Context, id outbox.EventID) []eventAtDestination {
	if len(h.cfg.Destinations) == 0 {
		return nil
	}
	out := make([]eventAtDestination, 0, len(h.cfg.Destinations))
	for _, d := range h.cfg.Destinations {
		one := eventAtDestination{Name: d.Name, Table: d.Table}
		rec, err := d.Store.GetEvent(ctx, id)
		switch {
		case errors.Is(err, outbox.ErrNotFound):
		case err != nil:
			one.LastError = fmt.Sprintf("could not read the destination's table: %v", err)
		default:
			st := rec.Status
			one.Status, one.RetryCount, one.LastError = &st, rec.RetryCount, rec.LastError
			atts, err := d.Store.Attempts(ctx, id)
			if err != nil {
				one.LastError = fmt.Sprintf("could not read the attempts: %v", err)
			}
			for _, a := range atts {
				one.Attempts = append(one.Attempts, attemptFromStore(a))
			}
		}
		out = append(out, one)
	}
	return out
}
