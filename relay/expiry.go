// Expiry: an event's deadline (expires_at, on the database's clock) is
// converted to the relay's clock at the claim; the relay never sends an
// event past it, and an event held back (breaker open, retry) is due again
// before its deadline, so that a relay ends it EXPIRED saying why.

package relay

import (
	"time"

	"github.com/txoutbox/outbox/store"
)

// localDeadline converts an event's expires_at to the local clock.
func (b *batch) localDeadline(ev *store.Claimed) time.Time {
	if ev.ExpiresAt.IsZero() {
		return time.Time{}
	}
	return b.localClaim.Add(ev.ExpiresAt.Sub(b.claim.DBTime))
}

// deadlineLead is how long before its deadline an event given back by the
// breaker is due again at the latest: a poll interval (an idle relay looks
// that seldom) and a quarter of a second (the outcome is recorded a moment
// after the wait is computed). A relay then sees it again before its
// deadline and, while the route stays open, ends it EXPIRED saying why,
// rather than leaving it to the sweeper, which cannot say that the
// destination was down.
func (r *Relay) deadlineLead() time.Duration { return r.cfg.PollInterval + 250*time.Millisecond }

// dueBy shortens wait (from now) so that an event with a deadline is due
// again before it: lead before, or, when the deadline is closer than
// that, halfway to it (at least 50ms later, so that an event near its
// deadline is looked at a few times, not in a tight loop).
func dueBy(wait time.Duration, deadline, now time.Time, lead time.Duration) time.Duration {
	if deadline.IsZero() {
		return wait
	}
	left := max(deadline.Sub(now), 0)
	if left > lead {
		return min(wait, left-lead)
	}
	return min(wait, max(left/2, 50*time.Millisecond))
}
