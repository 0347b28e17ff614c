//go:build unix

package e2etest

import (
	"os"
	"path/filepath"
	"syscall"
)

// lockBuild waits for the machine-wide lock on building the CLI and
// returns its release. Test processes that start at once (go test -p N)
// would otherwise each compile the whole tree into the shared build
// cache, in parallel: N compiles of the same packages on a cold cache.
// Under the lock the first builds and the others find the cache filled.
// If the lock file cannot be used, the build goes ahead unlocked.
func lockBuild() (release func()) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "outbox-test-cli-build.lock"), os.O_CREATE|os.O_RDONLY, 0o666)
	if err != nil {
		return func() {}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return func() {}
	}
	return func() { f.Close() } // closing the file releases the lock
}
