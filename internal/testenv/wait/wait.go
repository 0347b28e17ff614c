// Package wait holds the tests' one way to wait for a condition: poll it
// until it holds, and fail the test with what was awaited when a deadline
// passes first. It imports nothing but the standard library, so that the
// conformance kits (store/storetest, relay/relaytest, sink/sinktest) can
// use it without pulling in a database driver.
package wait

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// Interval is how often Until and For check their condition.
const Interval = 10 * time.Millisecond

// Until checks cond every Interval until it returns true, and fails the
// test if it has not after timeout; what says what was awaited. An error
// from cond is not fatal: the condition is checked again, and the last
// error is printed if the deadline passes.
func Until(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	var lastErr error
	for {
		ok, err := cond()
		if err != nil {
			lastErr = err
		} else if ok {
			return
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, lastErr)
			}
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// For is Until for a condition that cannot fail.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, timeout, what, func() (bool, error) { return cond(), nil })
}

// WhileProgressing is Until for a long drain on a loaded machine: cond
// returns whether the wait is over and a progress counter (events
// delivered, say). The test fails only when the counter has not grown for
// idle, or when limit has passed in all, so that a slow drain passes and
// a stalled one fails within idle.
func WhileProgressing(t testing.TB, idle, limit time.Duration, what string, cond func() (done bool, progress int64, err error)) {
	t.Helper()
	start := time.Now()
	last, moved := int64(math.MinInt64), start
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	var lastErr error
	for {
		done, progress, err := cond()
		now := time.Now()
		if err != nil {
			lastErr = err
		} else if done {
			return
		} else if progress > last {
			last, moved = progress, now
		}
		if now.Sub(moved) > idle || now.Sub(start) > limit {
			msg := fmt.Sprintf("gave up after %s waiting for %s: progress %d, unchanged for %s (bounds: %s without progress, %s in all)",
				now.Sub(start).Round(time.Millisecond), what, last, now.Sub(moved).Round(time.Millisecond), idle, limit)
			if lastErr != nil {
				msg += fmt.Sprintf(" (last error: %v)", lastErr)
			}
			t.Fatalf("%s", msg)
		}
		<-tick.C
	}
}
