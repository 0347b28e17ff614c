package mysql_test

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine they started is still
// running once they all passed. It runs four parallel tests at once unless
// -parallel is given (go test's default is one per core): the suites wait
// on MariaDB's round trips far more than they compute, and this package
// is the longest of the README's test command.
func TestMain(m *testing.M) {
	flag.Parse()
	if !parallelSet() {
		_ = flag.Set("test.parallel", "4")
	}
	goleak.VerifyTestMain(m)
}

// parallelSet reports whether -test.parallel was given.
func parallelSet() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	return set
}
