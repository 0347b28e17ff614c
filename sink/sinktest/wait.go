package sinktest

import (
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/testenv/wait"
)

// Eventually checks cond every 10ms until it holds, and fails the test if
// it still does not after timeout; what says what was awaited.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.For(t, timeout, what, cond)
}
