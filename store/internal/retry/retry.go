// Package retry runs a store's transaction again when the database gave it
// up over a lock conflict (a deadlock, a busy lock), after a growing, capped
// wait. The backends keep their own policies: what counts as a conflict,
// how long to wait, what to count and log. The waits come from
// internal/backoff, the module's one backoff.
package retry

import (
	"context"
	"time"

	"github.com/txoutbox/outbox/internal/backoff"
)

// Policy says when and how often to run f again.
type Policy struct {
	// Attempts bounds the runs of f.
	Attempts int
	// First is the wait before the first retry; each retry doubles it, up
	// to Max. First must be positive.
	First, Max time.Duration
	// Jitter draws each wait at random from [d/2, d) below the delay d
	// (backoff's equal jitter), so that transactions that met each other
	// do not retry in lockstep. Without it each wait is d.
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
	waits := backoff.Policy{Min: p.First, Max: p.Max}
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
		wait := waits.Base(attempt)
		if p.Jitter {
			wait = waits.Delay(attempt)
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
	}
}
