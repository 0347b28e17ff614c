//go:build !linux

package testenv

import "os/exec"

// dieWithTestProcess does nothing where there is no parent-death signal:
// the server is stopped by the test's cleanup only.
func dieWithTestProcess(cmd *exec.Cmd) {}
