//go:build linux

package testenv

import (
	"os/exec"
	"syscall"
)

// dieWithTestProcess has cmd killed (SIGKILL) when the test process dies,
// so that a private server never outlives it.
func dieWithTestProcess(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
