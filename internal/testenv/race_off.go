//go:build !race

package testenv

// Race is true when the test binary was built with the race detector.
const Race = false
