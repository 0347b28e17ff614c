//go:build unix

package testenv

import (
	"fmt"
	"os"
)

// lockPort takes an exclusive lock on the port's file in dir without
// waiting; an error means another process (or this one) holds it.
func lockPort(dir string, port int) (*os.File, error) {
	f, err := flockFile(fmt.Sprintf("%s/%d", dir, port), true)
	if err != nil {
		return nil, fmt.Errorf("port %d is taken by another test process: %w", port, err)
	}
	return f, nil
}
