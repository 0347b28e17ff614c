package benchkit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/txoutbox/outbox/internal/benchkit"
)

// TestGatewayCounts sends the gateway events in and out of order, a
// repeat and a request that is no event, one after another, and checks
// what it counted.
func TestGatewayCounts(t *testing.T) {
	t.Parallel()
	gw, err := benchkit.NewGateway(0, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	post := func(body, aggregate string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, gw.URL(), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if aggregate != "" {
			req.Header.Set("Outbox-Aggregate-Id", aggregate)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d, want 204", resp.StatusCode)
		}
	}
	ev := func(seq int64) string { return string(benchkit.NewEvent(seq, 2).Payload) }
	post(ev(0), "pay-0")
	post(ev(4), "pay-0")
	post(ev(2), "")      // aggregate 0 after its event 4: a violation
	post(ev(1), "pay-1") // aggregate 1's first
	post(ev(4), "pay-0") // a repeat
	post(`{"other":1}`, "")
	post(ev(3), "pay-0") // the header names the wrong aggregate
	if got := gw.Delivered(); got != 5 {
		t.Errorf("delivered %d, want 5", got)
	}
	if got := gw.Violations(); got != 1 {
		t.Errorf("violations %d, want 1", got)
	}
	if got := gw.Duplicates(); got != 1 {
		t.Errorf("duplicates %d, want 1", got)
	}
	if n, first := gw.Invalid(); n != 2 || !strings.Contains(first, "no sequence number") {
		t.Errorf("invalid %d (first: %s), want 2, the first without a sequence number", n, first)
	}
	gw.Reset()
	if gw.Delivered() != 0 || gw.Violations() != 0 || gw.Duplicates() != 0 {
		t.Errorf("Reset left counts: %d delivered, %d violations, %d duplicates", gw.Delivered(), gw.Violations(), gw.Duplicates())
	}
}
