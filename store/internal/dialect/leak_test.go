package dialect

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine they started is still
// running once they all passed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
