// Package wait holds the tests' one way to wait for a condition: poll it
// until it holds, and fail the test with what was awaited when a deadline
// passes first. It imports nothing but the standard library, so that the
// conformance kits (store/storetest, relay/relaytest, sink/sinktest) can
// use it without pulling in a database driver.
package wait

import (
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
