package sink

import (
	"time"
)

// Health is implemented by sinks that know whether their destination can
// be reached. The relay's readiness check uses it to say "the sink has
// been reached" or "the sink is known to be down" (and why).
//
// Every sink of this module implements it. The broker sinks connect in
// the background, so their state moves without traffic; the HTTP sink
// learns it from its requests.
type Health interface {
	// Reachable reports ok while the destination answers: the sink is
	// connected, or its last contact got an answer. It is false before
	// the first contact and while the destination is known to be down;
	// lastErr then says why (nil when no attempt has finished yet, or
	// once it is reachable). since is when the current state began (the
	// sink's creation, before the first attempt). lastErr never carries
	// a password.
	Reachable() (ok bool, lastErr error, since time.Time)
}
