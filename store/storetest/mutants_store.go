package storetest

import (
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// RunStoreGuarantees checks, on the Store contract directly, the
// guarantees whose code mutation testing found untested: each test names
// the behaviour it pins down.
func RunStoreGuarantees(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"PileBehindFailedDoesNotStarveOthers", testPileBehindFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

// testPileBehindFailed: events enqueued behind a FAILED head after the
// failure was recorded are found by the claim itself, which moves them to
// BLOCKED (no sweep runs here), so that however many pile up they never
// fill the next claim's window and starve the other aggregates.
func testPileBehindFailed(t *testing.T, h *Harness) {
	enqueue(t, h, ev("poisoned", 1))
	c := claim(t, h.Store, 2, time.Minute, true)
	complete(t, h.Store, c, true, outcomes(c, store.Failed))
	enqueue(t, h, ev("poisoned", 2), ev("poisoned", 3), ev("poisoned", 4), ev("poisoned", 5))
	other := enqueue(t, h, ev("healthy", 1))[0]
	reached := false
	for i := 0; i < 5 && !reached; i++ {
		got := claim(t, h.Store, 2, time.Minute, true)
		for _, e := range got.Events {
			if e.AggregateID == "poisoned" {
				t.Fatalf("claimed %s/%d behind a FAILED head", e.AggregateID, e.ID)
			}
			reached = reached || e.EventID == other
		}
	}
	if !reached {
		t.Fatal("5 claims with a window of 2 never reached the other aggregate's event queued behind the pile")
	}
	if n := countStatus(t, h.Store, outbox.StatusBlocked); n != 4 {
		t.Fatalf("%d events BLOCKED after the claims, want the 4 behind the FAILED head", n)
	}
}
