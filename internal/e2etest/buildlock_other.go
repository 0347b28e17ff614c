//go:build !unix

package e2etest

// lockBuild: no machine-wide lock on this platform; concurrent test
// processes each build the CLI.
func lockBuild() (release func()) { return func() {} }
