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
func RunDeadlines(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
		// serial: the test measures deadlines met under load of its own
		// making; it runs alone, before the others of the suite start.
		serial bool
	}{
		{name: "AttemptKeepsTraceID", fn: testAttemptTraceID},
		{name: "EDFClaimShare", fn: testEDFClaimShare},
		{name: "EDFKeepsAggregateOrder", fn: testEDFKeepsAggregateOrder},
		{name: "EDFFairness", fn: testEDFFairness},
		{name: "EDFMeetsDeadlinesUnderBacklog", fn: testEDFMeetsDeadlines, serial: true},
		{name: "StrictFIFOMissesDeadlinesUnderBacklog", fn: testStrictFIFOMissesDeadlines, serial: true},
		{name: "CompensationBySweeper", fn: testCompensationBySweeper},
		{name: "CompensationByComplete", fn: testCompensationByComplete},
		{name: "CompensationThroughRelay", fn: testCompensationThroughRelay},
		{name: "OnExpiredBadInput", fn: testOnExpiredBadInput},
		{name: "MinTimeLeftNeverSendsTooLate", fn: testMinTimeLeft},
		{name: "RestartReport", fn: testRestartReport},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.serial {
				t.Parallel()
			}
			tc.fn(t, newHarness(t))
		})
	}
}

// testAttemptTraceID: the trace id an outcome carries is kept in its
// attempt row, and an outcome without one leaves it empty.
func testAttemptTraceID(t *testing.T, h *Harness) {
	ctx := context.Background()
	enqueue(t, h, ev("tr-1", 1), ev("tr-2", 1))
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
