//go:build unix

package testenv

import (
	"fmt"
	"os"
	"syscall"
)

// lockPort takes an exclusive lock on the port's file in dir without
// waiting; an error means another process (or this one) holds it.
func lockPort(dir string, port int) (*os.File, error) {
	f, err := os.OpenFile(fmt.Sprintf("%s/%d", dir, port), os.O_CREATE|os.O_RDONLY, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("port %d is taken by another test process: %w", port, err)
	}
	return f, nil
}
