package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store"
)

// RunDeadlines checks what the store does for deadlines and the audit
// trail: the trace id of each attempt, the earliest-deadline-first share
// of the claim, and the compensating event of an event that ends EXPIRED.
// What the relay makes of them (deadlines met under a backlog, the
// restart report) is checked by relay/relaytest.
func RunDeadlines(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"AttemptKeepsTraceID", testAttemptTraceID},
		{"EDFClaimShare", testEDFClaimShare},
		{"EDFKeepsAggregateOrder", testEDFKeepsAggregateOrder},
		{"EDFFairness", testEDFFairness},
		{"CompensationBySweeper", testCompensationBySweeper},
		{"CompensationByComplete", testCompensationByComplete},
		{"OnExpiredBadInput", testOnExpiredBadInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

// testAttemptTraceID: the trace id an outcome carries is kept in its
// attempt row, and an outcome without one leaves it empty.
func testAttemptTraceID(t *testing.T, h *Harness) {
	ctx := context.Background()
	Enqueue(t, h, PaymentEvent("tr-1", 1), PaymentEvent("tr-2", 1))
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 2 {
		t.Fatalf("claimed %d, want 2", len(c.Events))
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	outs := outcomes(c, store.Delivered)
	outs[0].TraceID = traceID
	complete(t, h.Store, c, true, outs)
	for i, want := range []string{traceID, ""} {
		atts, err := h.Store.Attempts(ctx, c.Events[i].EventID)
		if err != nil {
			t.Fatal(err)
		}
		if len(atts) != 1 || atts[0].TraceID != want {
			t.Errorf("event %d: attempts %+v, want one with trace id %q", i, atts, want)
		}
	}
}
