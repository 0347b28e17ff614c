//go:build unix

package testenv

import (
	"errors"
	"syscall"
)

// processRuns reports whether a process with this pid runs on this machine.
func processRuns(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
