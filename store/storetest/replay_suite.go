package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
)

// RunReplay checks Store.Replay: a delivered event goes back to PENDING
// with its id and row, its earlier delivery stays in the trail and the next
// one is a new attempt; an aggregate's replayed events are delivered again
// in their order, before its newer events still waiting, even behind a
// lane's cursor; every replayed event has an audit row with the operator
// and the reason; a dry run counts and changes nothing; an aggregate with
// an event in flight, FAILED or BLOCKED is left alone and reported; the
// filter (event type, delivery time) keeps SKIPPED and undelivered events
// out.
func RunReplay(t *testing.T, newHarness Factory) {
	t.Run("Aggregate", func(t *testing.T) {
		t.Parallel()
		testReplayAggregate(t, newHarness(t))
	})
	t.Run("HeldAggregates", func(t *testing.T) {
		t.Parallel()
		testReplayHeld(t, newHarness(t))
	})
	t.Run("RowWithoutLane", func(t *testing.T) {
		t.Parallel()
		testReplayRowWithoutLane(t, newHarness(t))
	})
	t.Run("Filter", func(t *testing.T) {
		t.Parallel()
		testReplayFilter(t, newHarness(t))
	})
}

// replayRelay is the relay id of the suite's claims: claimAllDeliver's, so
// that one relay holds the lanes throughout.
const replayRelay = "producers"

// replayClaim claims up to limit events as replayRelay.
func replayClaim(t *testing.T, h *Harness, limit int) *store.Claim {
	t.Helper()
	c, err := h.Store.Claim(context.Background(), store.ClaimRequest{RelayID: replayRelay, Limit: limit, Lease: time.Minute, FailedBlocks: true})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return c
}

// replayComplete records the outcome kind for every event of c.
func replayComplete(t *testing.T, h *Harness, c *store.Claim, kind store.OutcomeKind) {
	t.Helper()
	outs := outcomes(c, kind)
	for i := range outs {
		// Each delivery gets a receipt of its own: a replay keeps the
		// first one's with it in the trail.
		outs[i].Receipt = []byte(fmt.Sprintf(`{"kind":"test","attempt":%d}`, outs[i].Attempt))
	}
	_, err := h.Store.Complete(context.Background(), store.CompleteRequest{Token: c.Token, RelayID: replayRelay, FailedBlocks: true,
		Outcomes: outs})
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// replaySQL writes q (with ? placeholders) for the harness's database.
func replaySQL(h *Harness, q string) string {
	if h.Bind != nil {
		return h.Bind(q)
	}
	return q
}

// replayDeliverOneByOne claims one event at a time until nothing is due,
// delivers it, and returns the events in delivery order.
func replayDeliverOneByOne(t *testing.T, h *Harness) []store.Claimed {
	t.Helper()
	var out []store.Claimed
	for {
		c := replayClaim(t, h, 1)
		if len(c.Events) == 0 {
			return out
		}
		replayComplete(t, h, c, store.Delivered)
		out = append(out, c.Events...)
	}
}

func statusesOf(t *testing.T, h *Harness, ids ...outbox.EventID) []outbox.Status {
	t.Helper()
	out := make([]outbox.Status, len(ids))
	for i, id := range ids {
		r, err := h.Store.GetEvent(context.Background(), id)
		if err != nil {
			t.Fatalf("event %s: %v", id, err)
		}
		out[i] = r.Status
	}
	return out
}

func repeatStatus(s outbox.Status, n int) []outbox.Status {
	out := make([]outbox.Status, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func testReplayAggregate(t *testing.T, h *Harness) {
	ctx := context.Background()
	all := Enqueue(t, h, PaymentEvent("replay-x", 1), PaymentEvent("replay-x", 2), PaymentEvent("replay-x", 3),
		PaymentEvent("replay-y", 1), PaymentEvent("replay-y", 2))
	xs, ys := all[:3], all[3:]
	first := replayClaim(t, h, 10)
	if len(first.Events) != 5 {
		t.Fatalf("claimed %d events, want 5", len(first.Events))
	}
	replayComplete(t, h, first, store.Delivered)
	last, err := h.Store.GetEvent(ctx, xs[2])
	if err != nil {
		t.Fatal(err)
	}
	if h.Store.Features().CursorGuard != nil && h.SQL != nil {
		// The lane's cursor passes the delivered events: a replayed row
		// behind it must still be claimed.
		lane := postgresLane("payment", "replay-x")
		wait.Until(t, 30*time.Second, "the lane's cursor to pass the delivered events", func() (bool, error) {
			if c := replayClaim(t, h, 10); len(c.Events) != 0 {
				t.Fatalf("claimed %v with every event delivered", ids(c))
			}
			var next int64
			err := h.SQL.QueryRowContext(ctx, replaySQL(h, "SELECT next_id FROM "+h.Table+"_lanes WHERE lane = ?"), lane).Scan(&next)
			return next > last.ID, err
		})
	}
	newer := Enqueue(t, h, PaymentEvent("replay-x", 4))[0]
	before, err := h.Store.Attempts(ctx, xs[0])
	if err != nil {
		t.Fatal(err)
	}
	req := store.ReplayRequest{
		Filter: store.ReplayFilter{AggregateType: "payment", AggregateID: "replay-x"},
		Action: store.OperatorAction{Actor: "alice", Reason: "consumer lost its data"},
		DryRun: true,
	}
	res, err := h.Store.Replay(ctx, req)
	if err != nil || res.Events != 3 || res.Aggregates != 1 || len(res.Held) != 0 {
		t.Fatalf("dry run = %+v, %v; want 3 events of 1 aggregate", res, err)
	}
	if got := statusesOf(t, h, all...); !slices.Equal(got, repeatStatus(outbox.StatusProcessed, 5)) {
		t.Fatalf("after the dry run: %v, want every event still PROCESSED", got)
	}
	if after, err := h.Store.Attempts(ctx, xs[0]); err != nil || len(after) != len(before) {
		t.Fatalf("the dry run wrote to the trail: %d attempts, %v; want %d", len(after), err, len(before))
	}

	req.DryRun = false
	res, err = h.Store.Replay(ctx, req)
	if err != nil || res.Events != 3 || res.Aggregates != 1 || len(res.Held) != 0 {
		t.Fatalf("replay = %+v, %v; want 3 events of 1 aggregate", res, err)
	}
	if got := statusesOf(t, h, xs...); !slices.Equal(got, repeatStatus(outbox.StatusPending, 3)) {
		t.Errorf("replayed events: %v, want PENDING", got)
	}
	if got := statusesOf(t, h, ys...); !slices.Equal(got, repeatStatus(outbox.StatusProcessed, 2)) {
		t.Errorf("the other aggregate: %v, want untouched (PROCESSED)", got)
	}
	if r, err := h.Store.GetEvent(ctx, xs[2]); err != nil || r.ID != last.ID {
		t.Errorf("replayed event: row %d, %v; want the same row %d", r.ID, err, last.ID)
	}

	// Delivered again with the same ids, in order, before the aggregate's
	// newer event that was waiting; each a new attempt.
	again := replayDeliverOneByOne(t, h)
	var order []outbox.EventID
	for _, e := range again {
		order = append(order, e.EventID)
		if e.EventID != newer && e.Attempt != 2 {
			t.Errorf("replayed event %s delivered as attempt %d, want 2", e.EventID, e.Attempt)
		}
	}
	if want := append(slices.Clone(xs), newer); !slices.Equal(order, want) {
		t.Fatalf("delivered after the replay: %v, want %v (the replayed events in order, then the newer one)", order, want)
	}
	atts, err := h.Store.Attempts(ctx, xs[0])
	if err != nil {
		t.Fatal(err)
	}
	var delivered []int
	var audit []store.Attempt
	for _, a := range atts {
		switch a.Outcome {
		case store.Delivered:
			delivered = append(delivered, a.Attempt)
			if want := fmt.Sprintf(`{"kind":"test","attempt":%d}`, a.Attempt); string(a.Receipt) != want {
				t.Errorf("delivery %d in the trail has receipt %s, want %s (each delivery keeps its own)", a.Attempt, a.Receipt, want)
			}
		case store.Replayed:
			audit = append(audit, a)
		}
	}
	if !slices.Equal(delivered, []int{1, 2}) {
		t.Errorf("deliveries in the trail: attempts %v, want [1 2] (the first one kept): %+v", delivered, atts)
	}
	if len(audit) != 1 || audit[0].RelayID != "operator:alice" || !strings.Contains(audit[0].Error, "consumer lost its data") ||
		!strings.Contains(audit[0].Error, "aggregate payment/replay-x") {
		t.Errorf("audit rows of the replay: %+v, want one by operator:alice naming the reason and the filter", audit)
	}
}

func testReplayHeld(t *testing.T, h *Harness) {
	ctx := context.Background()
	done := Enqueue(t, h, PaymentEvent("held-busy", 1), PaymentEvent("held-busy", 2), PaymentEvent("held-failed", 1),
		PaymentEvent("held-free", 1))
	claimAllDeliver(t, h)
	failing := Enqueue(t, h, PaymentEvent("held-failed", 2))[0]
	c := replayClaim(t, h, 10)
	if len(c.Events) != 1 || c.Events[0].EventID != failing {
		t.Fatalf("claimed %v, want the failing event", ids(c))
	}
	replayComplete(t, h, c, store.Failed)
	inFlight := Enqueue(t, h, PaymentEvent("held-busy", 3))[0]
	if c := replayClaim(t, h, 10); len(c.Events) != 1 || c.Events[0].EventID != inFlight {
		t.Fatalf("claimed %v, want the event left in flight", ids(c))
	}
	want := []store.HeldAggregate{
		{AggregateType: "payment", AggregateID: "held-busy", EventID: inFlight, Status: outbox.StatusProcessing, Matched: 2},
		{AggregateType: "payment", AggregateID: "held-failed", EventID: failing, Status: outbox.StatusFailed, Matched: 1},
	}
	for _, dry := range []bool{true, false} {
		res, err := h.Store.Replay(ctx, store.ReplayRequest{Filter: store.ReplayFilter{AggregateType: "payment"},
			Action: store.OperatorAction{Actor: "bob", Reason: "resend"}, DryRun: dry})
		if err != nil || res.Events != 1 || res.Aggregates != 1 || !slices.Equal(res.Held, want) {
			t.Fatalf("replay (dry run %v) = %+v, %v; want 1 event (held-free) and the held aggregates %+v", dry, res, err, want)
		}
	}
	if got := statusesOf(t, h, done...); !slices.Equal(got, []outbox.Status{outbox.StatusProcessed, outbox.StatusProcessed,
		outbox.StatusProcessed, outbox.StatusPending}) {
		t.Errorf("after the replay: %v, want the held aggregates' events PROCESSED and held-free's PENDING", got)
	}
	res, err := h.Store.Replay(ctx, store.ReplayRequest{Filter: store.ReplayFilter{AggregateType: "payment", AggregateID: "held-busy"},
		Action: store.OperatorAction{Actor: "bob", Reason: "resend"}})
	if err != nil || res.Events != 0 || len(res.Held) != 1 || !strings.Contains(res.Held[0].String(), "held-busy") ||
		!strings.Contains(res.Held[0].String(), "PROCESSING") {
		t.Errorf("replay of the busy aggregate = %+v, %v; want it held, named with the event in flight", res, err)
	}
}

func testReplayFilter(t *testing.T, h *Harness) {
	ctx := context.Background()
	action := store.OperatorAction{Actor: "carol", Reason: "audit"}
	for name, f := range map[string]store.ReplayFilter{
		"empty":                  {},
		"id without type":        {AggregateID: "x"},
		"since not before until": {EventType: "A", Since: time.Now(), Until: time.Now().Add(-time.Hour)},
	} {
		if _, err := h.Store.Replay(ctx, store.ReplayRequest{Filter: f, Action: action}); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("filter %s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := h.Store.Replay(ctx, store.ReplayRequest{Filter: store.ReplayFilter{EventType: "A"}, Action: store.OperatorAction{Actor: "carol"}}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("no reason: %v, want ErrInvalidConfig", err)
	}
	typed := func(id, typ string) outbox.Event {
		e := PaymentEvent(id, 1)
		e.EventType = typ
		return e
	}
	first := Enqueue(t, h, typed("f-1", "Captured"), typed("f-2", "Refunded"))
	claimAllDeliver(t, h)
	r, err := h.Store.GetEvent(ctx, first[0])
	if err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, "the clock to pass the first delivery", func() (bool, error) {
		return time.Now().After(r.ProcessedAt.Add(5 * time.Millisecond)), nil
	})
	second := Enqueue(t, h, typed("f-3", "Captured"), typed("f-4", "Captured"))
	claimAllDeliver(t, h)
	skipped := Enqueue(t, h, typed("f-5", "Captured"))[0]
	c := replayClaim(t, h, 10)
	replayComplete(t, h, c, store.Failed)
	if err := h.Store.Skip(ctx, store.OperatorAction{EventID: skipped, Actor: "carol"}); err != nil {
		t.Fatal(err)
	}
	waiting := Enqueue(t, h, typed("f-6", "Captured"))[0]
	since := r.ProcessedAt.Add(time.Millisecond)
	count := func(f store.ReplayFilter) int64 {
		t.Helper()
		res, err := h.Store.Replay(ctx, store.ReplayRequest{Filter: f, Action: action, DryRun: true})
		if err != nil {
			t.Fatalf("dry run of %s: %v", f, err)
		}
		return res.Events
	}
	for _, tc := range []struct {
		f    store.ReplayFilter
		want int64
	}{
		{store.ReplayFilter{EventType: "Captured"}, 3},
		{store.ReplayFilter{EventType: "Refunded"}, 1},
		{store.ReplayFilter{AggregateType: "payment"}, 4},
		{store.ReplayFilter{AggregateType: "order"}, 0},
		{store.ReplayFilter{Since: since}, 2},
		{store.ReplayFilter{Until: since}, 2},
		{store.ReplayFilter{EventType: "Captured", Until: since}, 1},
	} {
		if got := count(tc.f); got != tc.want {
			t.Errorf("dry run of %s = %d, want %d", tc.f, got, tc.want)
		}
	}
	res, err := h.Store.Replay(ctx, store.ReplayRequest{Filter: store.ReplayFilter{Since: since}, Action: action})
	if err != nil || res.Events != 2 || res.Aggregates != 2 {
		t.Fatalf("replay since the second delivery = %+v, %v; want 2 events of 2 aggregates", res, err)
	}
	if got := statusesOf(t, h, append(append(slices.Clone(first), second...), skipped, waiting)...); !slices.Equal(got, []outbox.Status{
		outbox.StatusProcessed, outbox.StatusProcessed, outbox.StatusPending, outbox.StatusPending, outbox.StatusSkipped, outbox.StatusPending}) {
		t.Errorf("after the replay: %v", got)
	}
}

// testReplayRowWithoutLane: a row that finished before the lanes'
// migration has no lane (PostgreSQL and MySQL give lanes to unfinished
// rows only); replayed, it gets its aggregate's lane and is claimed at
// once.
func testReplayRowWithoutLane(t *testing.T, h *Harness) {
	if h.SQL == nil || h.SingleWriter {
		t.Skip("the backend gives every row a lane (or the harness has no SQL handle)")
	}
	ctx := context.Background()
	id := Enqueue(t, h, PaymentEvent("no-lane", 1))[0]
	claimAllDeliver(t, h)
	if _, err := h.SQL.ExecContext(ctx, replaySQL(h, "UPDATE "+h.Table+" SET lane = NULL WHERE event_id = ?"), id.String()); err != nil {
		t.Fatal(err)
	}
	res, err := h.Store.Replay(ctx, store.ReplayRequest{Filter: store.ReplayFilter{AggregateType: "payment", AggregateID: "no-lane"},
		Action: store.OperatorAction{Actor: "dave", Reason: "legacy row"}})
	if err != nil || res.Events != 1 {
		t.Fatalf("replay = %+v, %v; want 1 event", res, err)
	}
	c := replayClaim(t, h, 10)
	if len(c.Events) != 1 || c.Events[0].EventID != id {
		t.Fatalf("claim after the replay of a row without a lane = %v, want it", ids(c))
	}
	replayComplete(t, h, c, store.Delivered)
}
