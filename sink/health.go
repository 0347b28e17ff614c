package sink

import (
	"sync"
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

// Reachability keeps the [Health] state of one destination: sinks call Up
// when they reach it and Down when an attempt fails. It is safe for
// concurrent use; create it with [NewReachability].
type Reachability struct {
	mu      sync.Mutex
	ok      bool
	ever    bool
	lastErr error
	since   time.Time
}

// NewReachability returns the state of a destination not yet tried.
func NewReachability() *Reachability { return &Reachability{since: time.Now()} }

// Up records that the destination answered. It reports whether this
// changed the state (it was not reachable), and whether it was the first
// time ever.
func (r *Reachability) Up() (changed, first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ok {
		return false, false
	}
	first = !r.ever
	r.ok, r.ever, r.lastErr, r.since = true, true, nil, time.Now()
	return true, first
}

// Down records that an attempt to reach the destination failed with err.
// It reports whether this changed the state (it was reachable, or had
// not been tried yet).
func (r *Reachability) Down(err error) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed = r.ok || r.lastErr == nil
	if changed {
		r.since = time.Now()
	}
	r.ok, r.lastErr = false, err
	return changed
}

// Reachable implements [Health].
func (r *Reachability) Reachable() (ok bool, lastErr error, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok, r.lastErr, r.since
}

// Ever reports whether the destination was ever reached.
func (r *Reachability) Ever() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ever
}
