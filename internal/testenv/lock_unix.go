//go:build unix

package testenv

import (
	"os"
	"path/filepath"
	"syscall"
)

// flockFile opens path (creating it) and takes an exclusive flock on it;
// with nonblock it fails at once when another process holds the lock.
// Closing the file releases the lock, and so does the process's end.
func flockFile(path string, nonblock bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o666)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if nonblock {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// MachineLock waits for the machine-wide lock called name (a file in the
// temporary directory) and returns its release. If the lock file cannot
// be used, it returns at once and the release does nothing.
func MachineLock(name string) (release func()) {
	f, err := flockFile(filepath.Join(os.TempDir(), name), false)
	if err != nil {
		return func() {}
	}
	return func() { f.Close() }
}
