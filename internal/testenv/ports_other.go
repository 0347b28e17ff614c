//go:build !unix

package testenv

import (
	"fmt"
	"os"
)

// lockPort creates the port's file in dir; without flock, a file left by
// a process that ended keeps its port out of use until it is removed.
func lockPort(dir string, port int) (*os.File, error) {
	f, err := os.OpenFile(fmt.Sprintf("%s/%d", dir, port), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("port %d is taken by another test process: %w", port, err)
	}
	return f, nil
}
