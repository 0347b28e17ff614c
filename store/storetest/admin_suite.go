package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store"
)

// RunAdminQueries checks the store's admin queries (store.AdminQueries)
// that read the audit of the deliveries.
func RunAdminQueries(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"PublishDurations", testPublishDurations},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

// testPublishDurations completes events with known publish times (the
// outcomes' StartedAt to FinishedAt) and reads them back newest first,
// per event (a batch delivered in one call counts once per event),
// bounded by the window and the limit.
func testPublishDurations(t *testing.T, h *Harness) {
	ctx := context.Background()
	// complete claims the events enqueued on aggregates aggs and completes
	// them all as kind, published in d and finished at the claim's time
	// plus age.
	complete := func(kind store.OutcomeKind, d, age time.Duration, aggs ...string) {
		t.Helper()
		for i, a := range aggs {
			Enqueue(t, h, PaymentEvent(a, i))
		}
		c := claim(t, h.Store, 10, time.Minute, true)
		if len(c.Events) != len(aggs) {
			t.Fatalf("claimed %d events, want %d", len(c.Events), len(aggs))
		}
		outs := outcomes(c, kind)
		for i := range outs {
			outs[i].FinishedAt = c.DBTime.Add(age)
			outs[i].StartedAt = outs[i].FinishedAt.Add(-d)
			outs[i].RetryIn = time.Hour
		}
		if res, err := h.Store.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "test", FailedBlocks: true, Outcomes: outs}); err != nil || len(res.Applied) != len(aggs) {
			t.Fatalf("complete %s: %+v, %v", kind, res, err)
		}
	}
	q := h.Store.AdminQueries()
	t.Cleanup(func() { _ = q.Close() })
	read := func(since time.Duration, limit int) []time.Duration {
		t.Helper()
		got, err := q.PublishDurations(ctx, since, limit)
		if err != nil {
			t.Fatalf("publish durations (since %v, limit %d): %v", since, limit, err)
		}
		for i := range got {
			got[i] = got[i].Round(time.Millisecond)
		}
		return got
	}
	ms := time.Millisecond

	if got := read(time.Hour, 10); len(got) != 0 {
		t.Errorf("before any attempt: %v, want none", got)
	}
	// Oldest: a retried attempt that finished two hours ago (5 ms); then a
	// batch of three events delivered in one call (40 ms); a retried
	// attempt (70 ms, FAILED counts the same); the newest, one delivery
	// (10 ms).
	complete(store.Retry, 5*ms, -2*time.Hour, "pd-old")
	complete(store.Delivered, 40*ms, 0, "pd-b1", "pd-b2", "pd-b3")
	complete(store.Retry, 70*ms, time.Second, "pd-retry")
	complete(store.Delivered, 10*ms, 2*time.Second, "pd-new")

	for _, tc := range []struct {
		since time.Duration
		limit int
		want  []time.Duration
	}{
		{time.Hour, 100, []time.Duration{10 * ms, 70 * ms, 40 * ms, 40 * ms, 40 * ms}},
		{3 * time.Hour, 100, []time.Duration{10 * ms, 70 * ms, 40 * ms, 40 * ms, 40 * ms, 5 * ms}},
		{time.Hour, 2, []time.Duration{10 * ms, 70 * ms}},
		// The limit counts events: the batch is cut.
		{time.Hour, 4, []time.Duration{10 * ms, 70 * ms, 40 * ms, 40 * ms}},
		{time.Hour, 0, nil},
	} {
		if got := read(tc.since, tc.limit); !slices.Equal(got, tc.want) {
			t.Errorf("publish durations of the last %v, at most %d: %v, want %v", tc.since, tc.limit, got, tc.want)
		}
	}
}
