//go:build race

package testenv

import (
	"os"
	"strings"
)

// Race is true when the test binary was built with the race detector.
const Race = true

// The race detector makes every process it is built into sleep a second
// as it exits (GORACE's atexit_sleep_ms, 1000 by default), so that
// reports from goroutines still running can print. The tests start the
// CLI and relays as processes of their own many times, and wait for each
// to exit: a second apiece of nothing. A process this test binary starts
// inherits atexit_sleep_ms=0 unless GORACE sets it; a race is still
// reported where it happens, and the process still exits 66 after one.
func init() {
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		_ = os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
}
