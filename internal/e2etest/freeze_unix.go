//go:build unix

package e2etest

import (
	"syscall"
	"testing"
)

// Freeze stops the process with SIGSTOP: it runs no code until Thaw, so a
// test can change the world around it (stop a broker, say) at a moment of
// its own choosing, however long that change takes on a loaded machine.
// The process is thawed at the end of the test if Thaw was not called.
func (p *Process) Freeze(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("outbox %s: SIGSTOP: %v", p.args, err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
}

// Thaw resumes a process that Freeze stopped (SIGCONT).
func (p *Process) Thaw(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("outbox %s: SIGCONT: %v", p.args, err)
	}
}
