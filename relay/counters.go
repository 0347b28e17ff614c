package relay

import "sync/atomic"

type counters struct {
	claims, claimed, delivered, retried, failed, expired, released, fenced atomic.Int64
	claimErrors, completeErrors, outcomesRefused                           atomic.Int64
	reaped, sweptExpired, blocked, unblocked, purged, sweepErrors          atomic.Int64
}

// Stats are a relay's counters since it was created.
type Stats struct {
	Claims         int64 // claim round trips
	Claimed        int64 // events claimed
	Delivered      int64 // marked PROCESSED
	Retried        int64 // returned to PENDING with backoff
	Failed         int64 // marked FAILED (dead letter + alarm)
	Expired        int64 // marked EXPIRED by this relay's batches
	Released       int64 // returned to PENDING without an attempt counted
	Fenced         int64 // outcomes refused because the lease was lost
	ClaimErrors    int64
	CompleteErrors int64
	// OutcomesRefused counts events whose outcome the database refused to
	// store; each ended FAILED with the reason (or, if even that was
	// refused, was left to the reaper).
	OutcomesRefused int64
	Reaped          int64 // rows of dead relays returned to PENDING by this relay's sweeper
	SweptExpired    int64 // waiting events expired by the sweeper
	Blocked         int64
	Unblocked       int64
	Purged          int64 // finished events moved into the history by retention
	SweepErrors     int64
}

// Stats returns a snapshot of the relay's counters.
func (r *Relay) Stats() Stats {
	c := &r.stats
	return Stats{
		Claims: c.claims.Load(), Claimed: c.claimed.Load(), Delivered: c.delivered.Load(),
		Retried: c.retried.Load(), Failed: c.failed.Load(), Expired: c.expired.Load(),
		Released: c.released.Load(), Fenced: c.fenced.Load(), ClaimErrors: c.claimErrors.Load(),
		CompleteErrors: c.completeErrors.Load(), OutcomesRefused: c.outcomesRefused.Load(), Reaped: c.reaped.Load(), SweptExpired: c.sweptExpired.Load(),
		Blocked: c.blocked.Load(), Unblocked: c.unblocked.Load(), Purged: c.purged.Load(),
		SweepErrors: c.sweepErrors.Load(),
	}
}
