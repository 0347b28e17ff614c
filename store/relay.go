package store

import (
	"fmt"
	"math"

	"github.com/txoutbox/outbox"
)

// Validate checks that r names its relay and asks for at least one event
// under a positive lease; it returns outbox.ErrInvalidConfig otherwise.
func (r ClaimRequest) Validate() error {
	if r.RelayID == "" {
		return fmt.Errorf("%w: a claim needs a relay id: it names the relay that holds the lanes it claims in", outbox.ErrInvalidConfig)
	}
	if r.Limit <= 0 {
		return fmt.Errorf("%w: claim limit must be positive, got %d", outbox.ErrInvalidConfig, r.Limit)
	}
	if r.Lease <= 0 {
		return fmt.Errorf("%w: lease must be positive, got %s", outbox.ErrInvalidConfig, r.Lease)
	}
	if r.FIFOShare < 0 || r.FIFOShare > 1 || math.IsNaN(r.FIFOShare) {
		return fmt.Errorf("%w: FIFO share must be above 0 and at most 1 (e.g. 0.5 for half of each claim in id order), got %v",
			outbox.ErrInvalidConfig, r.FIFOShare)
	}
	return nil
}

// FIFOSlots splits a claim's window: fifo events in (available_at, id)
// order, which name the aggregates whose heads the claim takes first
// together with those of the deadline part, and deadline events, the due
// PENDING events with the nearest expires_at. fifo is at least 1 and
// fifo+deadline = Limit. With StrictFIFO, deadline is 0.
//
// Since the window holds at most Limit aggregates from these two parts,
// every one of them gets its head claimed (unless another relay holds it):
// at least fifo of each claim goes to the oldest due events, however many
// events with deadlines wait. The rest of the batch (runs behind the
// heads, and further events in id order when the deadline part is short)
// is filled as without deadlines.
func (r ClaimRequest) FIFOSlots() (fifo, deadline int) {
	if r.StrictFIFO {
		return r.Limit, 0
	}
	share := r.FIFOShare
	if share == 0 {
		share = DefaultFIFOShare
	}
	fifo = min(r.Limit, max(1, int(math.Ceil(float64(r.Limit)*share))))
	return fifo, r.Limit - fifo
}

// Normalize fills the defaults of r: Limit 1000 when it is not positive,
// RelayID "sweeper" (the relay named in audit rows) when it is empty.
func (r SweepRequest) Normalize() SweepRequest {
	if r.Limit <= 0 {
		r.Limit = 1000
	}
	if r.RelayID == "" {
		r.RelayID = "sweeper"
	}
	return r
}
