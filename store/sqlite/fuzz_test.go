package sqlite_test

import (
	"testing"

	"github.com/txoutbox/outbox/store/storetest"
)

// FuzzOutcomeText completes a claimed event with a fuzzed error text and
// checks that the outcome is recorded, whatever the text holds (see
// storetest.FuzzOutcome). Its seeds are in testdata/fuzz/FuzzOutcomeText.
func FuzzOutcomeText(f *testing.F) {
	storetest.FuzzOutcome(f, newConformanceHarness(f))
}
