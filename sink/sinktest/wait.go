package sinktest

import (
	"testing"
	"time"
)

// Eventually checks cond every 10ms until it holds, and fails the test if
// it still does not after timeout; what says what was awaited.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("gave up after %s waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}
