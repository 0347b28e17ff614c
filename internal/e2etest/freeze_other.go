//go:build !unix

package e2etest

import "testing"

// Freeze needs SIGSTOP: the test is skipped where there is none.
func (p *Process) Freeze(t testing.TB) {
	t.Helper()
	t.Skip("freezing a process needs SIGSTOP (unix)")
}

// Thaw is never reached where Freeze skips the test.
func (p *Process) Thaw(t testing.TB) {}
