package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
)

// RunRequeue checks Store.CountMatching and Store.RequeueMatching: the
// filter (status, a case-insensitive LIKE on last_error, when the event
// ended, aggregate type), the audit row of each requeue, and the release
// of the events a requeued one held back.
func RunRequeue(t *testing.T, newHarness Factory) {
	t.Run("ByFilter", func(t *testing.T) {
		t.Parallel()
		testRequeueByFilter(t, newHarness(t))
	})
}

func testRequeueByFilter(t *testing.T, h *Harness) {
	ctx := context.Background()
	merchant := PaymentEvent("f", 1)
	merchant.AggregateType = "merchant"
	ids := Enqueue(t, h, PaymentEvent("a", 1), PaymentEvent("a", 2), PaymentEvent("b", 1), PaymentEvent("c", 1), PaymentEvent("d", 1), PaymentEvent("e", 1), merchant)
	a, a2, b, c, d, e, f := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]
	claim, err := h.Store.Claim(ctx, store.ClaimRequest{RelayID: "test", Limit: 100, Lease: time.Minute, FailedBlocks: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(claim.Events) != len(ids) {
		t.Fatalf("claimed %d events, want %d", len(claim.Events), len(ids))
	}
	rowID := map[outbox.EventID]int64{}
	for _, e := range claim.Events {
		rowID[e.EventID] = e.ID
	}
	out := func(id outbox.EventID, kind store.OutcomeKind, text string) store.Outcome {
		return store.Outcome{ID: rowID[id], EventID: id, Kind: kind, Attempt: 1, Error: text, Attempted: kind != store.Released,
			Block: kind == store.Released}
	}
	complete := func(outs ...store.Outcome) {
		t.Helper()
		res, err := h.Store.Complete(ctx, store.CompleteRequest{Token: claim.Token, RelayID: "test", FailedBlocks: true, Outcomes: outs})
		if err != nil || len(res.Applied) != len(outs) {
			t.Fatalf("complete: %+v, %v", res, err)
		}
	}
	// The first group ends, then (on a later database clock) the second.
	complete(out(a, store.Failed, "HTTP 503 Service Unavailable"), out(a2, store.Released, ""),
		out(b, store.Failed, "gateway answered 503"), out(c, store.Failed, "HTTP 400 bad request"),
		out(d, store.Expired, "expired during delivery: HTTP 503"))
	first, err := h.Store.GetEvent(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, "the clock to pass the first group's end", func() (bool, error) {
		return time.Now().After(first.ProcessedAt.Add(5 * time.Millisecond)), nil
	})
	complete(out(e, store.Failed, "HTTP 503 again"), out(f, store.Failed, "http 503 from the merchant API"))
	second, err := h.Store.GetEvent(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if !second.ProcessedAt.After(first.ProcessedAt) {
		t.Fatalf("second group ended at %s, not after the first (%s)", second.ProcessedAt, first.ProcessedAt)
	}
	since := first.ProcessedAt.Add(time.Millisecond)

	failed503 := store.RequeueFilter{Status: outbox.StatusFailed, ErrorLike: "%503%"}
	counts := []struct {
		name string
		f    store.RequeueFilter
		want int64
	}{
		{"FAILED like %503%", failed503, 4},
		{"case-insensitive", store.RequeueFilter{Status: outbox.StatusFailed, ErrorLike: "%service UNAVAILABLE%"}, 1},
		{"since", store.RequeueFilter{Status: outbox.StatusFailed, ErrorLike: "%503%", Since: since}, 2},
		{"until", store.RequeueFilter{Status: outbox.StatusFailed, ErrorLike: "%503%", Until: since}, 2},
		{"aggregate type", store.RequeueFilter{Status: outbox.StatusFailed, AggregateType: "merchant"}, 1},
		{"any FAILED", store.RequeueFilter{Status: outbox.StatusFailed}, 5},
		{"EXPIRED", store.RequeueFilter{Status: outbox.StatusExpired, ErrorLike: "%503%"}, 1},
		{"escaped %", store.RequeueFilter{Status: outbox.StatusFailed, ErrorLike: `%50\%%`}, 0},
		{"one character", store.RequeueFilter{Status: outbox.StatusFailed, ErrorLike: "HTTP 5_3%"}, 3},
	}
	for _, tc := range counts {
		n, err := h.Store.CountMatching(ctx, tc.f)
		if err != nil || n != tc.want {
			t.Errorf("CountMatching(%s) = %d, %v; want %d", tc.name, n, err, tc.want)
		}
	}
	if _, err := h.Store.CountMatching(ctx, store.RequeueFilter{Status: outbox.StatusPending}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("a PENDING filter: %v, want ErrInvalidConfig", err)
	}

	// The outage's casualties since it began: e and f, not a and b.
	n, err := h.Store.RequeueMatching(ctx, store.RequeueFilter{Status: outbox.StatusFailed, ErrorLike: "%503%", Since: since},
		store.OperatorAction{Actor: "ops", Reason: "gateway outage"})
	if err != nil || n != 2 {
		t.Fatalf("RequeueMatching since the outage = %d, %v; want 2", n, err)
	}
	for id, want := range map[outbox.EventID]outbox.Status{e: outbox.StatusPending, f: outbox.StatusPending,
		a: outbox.StatusFailed, b: outbox.StatusFailed, c: outbox.StatusFailed, d: outbox.StatusExpired, a2: outbox.StatusBlocked} {
		if r, err := h.Store.GetEvent(ctx, id); err != nil || r.Status != want {
			t.Errorf("event %s: %s, %v; want %s", id, r.Status, err, want)
		}
	}
	atts, err := h.Store.Attempts(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	last := atts[len(atts)-1]
	if last.Outcome != store.Requeued || last.RelayID != "operator:ops" ||
		!strings.Contains(last.Error, "gateway outage") || !strings.Contains(last.Error, `error like "%503%"`) {
		t.Errorf("audit row of a bulk requeue: %+v", last)
	}
	dls, err := h.Store.DeadLetters(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, dl := range dls {
		if requeued := !dl.RequeuedAt.IsZero(); requeued != (dl.EventID == e || dl.EventID == f) {
			t.Errorf("dead letter of %s: requeued_at %v", dl.EventID, dl.RequeuedAt)
		}
	}
	if n, err := h.Store.RequeueMatching(ctx, store.RequeueFilter{Status: outbox.StatusFailed, ErrorLike: "%503%", Since: since},
		store.OperatorAction{Actor: "ops"}); err != nil || n != 0 {
		t.Errorf("the same requeue again = %d, %v; want 0", n, err)
	}
	// The rest of the 503s: a's requeue releases a2, which waited behind it.
	if n, err := h.Store.RequeueMatching(ctx, failed503, store.OperatorAction{Actor: "ops"}); err != nil || n != 2 {
		t.Fatalf("RequeueMatching(FAILED like %%503%%) = %d, %v; want 2", n, err)
	}
	if r, err := h.Store.GetEvent(ctx, a2); err != nil || r.Status != outbox.StatusPending {
		t.Errorf("the event behind a requeued one: %s, %v; want PENDING", r.Status, err)
	}
	if r, err := h.Store.GetEvent(ctx, c); err != nil || r.Status != outbox.StatusFailed {
		t.Errorf("the 400: %s, %v; want still FAILED", r.Status, err)
	}
}
