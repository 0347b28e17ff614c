// Package backoff computes retry delays: exponential, capped, with "equal
// jitter". It is the one backoff of the module: the relay's retries of a
// failed event and the stores' retries of a transaction that lost a lock
// conflict (store/internal/retry) both draw their waits from it.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is exponential backoff with "equal jitter": the n-th retry waits a
// random time between half and all of min(Max, Min * 2^(n-1)), so that
// failing events spread out instead of retrying in lockstep, and never wait
// less than Min/2 nor more than Max.
type Policy struct {
	Min, Max time.Duration
	// Rand returns a float in [0, 1); nil means math/rand/v2.
	Rand func() float64
}

// Base returns the delay before retry number n (n >= 1) without jitter:
// min(Max, Min * 2^(n-1)), and 0 when that is not positive.
func (p Policy) Base(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := p.Min
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	if d > p.Max {
		d = p.Max
	}
	return max(d, 0)
}

// Delay returns the wait before retry number n (n >= 1): Base(n) with
// equal jitter, a random time in [Base(n)/2, Base(n)).
func (p Policy) Delay(n int) time.Duration {
	d := p.Base(n)
	if d <= 0 {
		return 0
	}
	r := rand.Float64
	if p.Rand != nil {
		r = p.Rand
	}
	half := d / 2
	return half + time.Duration(r()*float64(d-half))
}
