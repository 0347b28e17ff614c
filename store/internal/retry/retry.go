// Package retry runs a store's transaction again when the database gave it
// up over a lock conflict (a deadlock, a busy lock), after a growing, capped
// wait. The backends keep their own policies: what counts as a conflict,
// how long to wait, what to count and log.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy says when and how often to run f again.
type Policy struct {
	// Attempts bounds the runs of f.
	Attempts int
	// First is the wait before the first retry; each retry doubles it, up
	// to Max. First must be positive.
	First, Max time.Duration
	// Jitter draws each wait at random from [d/2, 3d/2) around the delay
	// d, so that transactions that met each other do not retry in lockstep.
	Jitter bool
	// Retryable reports whether an error of f is a conflict that another
	// run can get past. Other errors, and nil, are returned at once.
	Retryable func(error) bool

	// OnRetry, if set, runs before each wait with f's error, the attempt
	// that failed (from 1) and the wait.
	OnRetry func(err error, attempt int, wait time.Duration)
	// OnGiveUp, if set, runs when a conflict is returned because the
	// attempts are spent or ctx had ended when it came.
	OnGiveUp func(err error, attempt int)
	// OnCancel, if set, runs when ctx ends during a wait; the conflict is
	// then returned.
	OnCancel func(err error)
}

// Do runs f, and runs it again after each conflict, as p says. It returns
// f's last error.
func (p Policy) Do(ctx context.Context, f func() error) error {
	delay := p.First
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || !p.Retryable(err) {
			return err
		}
		if attempt >= p.Attempts || ctx.Err() != nil {
			if p.OnGiveUp != nil {
				p.OnGiveUp(err, attempt)
			}
			return err
		}
		wait := delay
		if p.Jitter {
			wait = delay/2 + rand.N(delay)
		}
		if p.OnRetry != nil {
			p.OnRetry(err, attempt, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			if p.OnCancel != nil {
				p.OnCancel(err)
			}
			return err
		case <-t.C:
		}
		delay = min(2*delay, p.Max)
	}
}
