package storetest

import (
	"context"
	"crypto/md5"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

// testClaimAnswerLost: a claim that committed but whose answer the relay
// never got (its deadline ended while it read the result) holds events the
// relay does not know it has. They must come back to the relay long before
// the lease it claimed them under ends: the relay keeps its lanes, and a
// claim it does not know of would hold them for as long as it does.
func testClaimAnswerLost(t *testing.T, h *Harness) {
	if h.LoseClaimAnswers == nil {
		t.Skip("this harness cannot lose a claim's answer")
	}
	ctx := context.Background()
	want := Enqueue(t, h, PaymentEvent("answer-lost", 1), PaymentEvent("answer-lost", 2))
	req := store.ClaimRequest{RelayID: "loses-answers", Limit: 10, Lease: 10 * time.Minute, FailedBlocks: true}
	h.LoseClaimAnswers(1)
	if c, err := h.Store.Claim(ctx, req); err == nil {
		t.Fatalf("claim = %v, want the lost answer's error", ids(c))
	}
	again, _ := claimAgainAfterSweeps(t, h, req, "the relay to claim the events of the claim whose answer was lost", want)
	if res := complete(t, h.Store, again, true, outcomes(again, store.Delivered)); len(res.Applied) != 2 {
		t.Fatalf("the new claim's completion = %+v, want both applied", res)
	}
	for _, id := range want {
		if r, err := h.Store.GetEvent(ctx, id); err != nil || r.Status != outbox.StatusProcessed {
			t.Fatalf("event %s after the completion = %+v, %v; want PROCESSED", id, r, err)
		}
	}
}

// testBusyLanesStayWithTheirRelay: a relay that gives lanes to a relay
// that joins gives only lanes with nothing in flight, and keeps renewing
// the others, whatever part of its batch it has recorded: the newcomer
// claims none of the events still in flight, the two hold every lane
// between them, once each, and the first relay's outcomes are applied.
func testBusyLanesStayWithTheirRelay(t *testing.T, h *Harness) {
	holder := h.Store
	ctx := context.Background()
	const n, left = 100, 10
	var events []outbox.Event
	for i := range n {
		events = append(events, PaymentEvent(fmt.Sprintf("busy-lane-%03d", i), 1))
	}
	Enqueue(t, h, events...)
	const lease = time.Minute
	a := store.ClaimRequest{RelayID: "lanes-a", Limit: n, Lease: lease, FailedBlocks: true, StrictFIFO: true}
	if err := holder.BalanceLanes(ctx, a.RelayID, lease); err != nil {
		t.Fatal(err)
	}
	c, err := h.Store.Claim(ctx, a)
	if err != nil || len(c.Events) != n {
		t.Fatalf("relay a claimed %d events (%v), want all %d", len(c.Events), err, n)
	}
	// Relay a records all but the last few of its batch.
	completeAs := func(relayID string, part *store.Claim) store.CompleteResult {
		t.Helper()
		res, err := h.Store.Complete(ctx, store.CompleteRequest{Token: part.Token, RelayID: relayID, FailedBlocks: true,
			Outcomes: outcomes(part, store.Delivered)})
		if err != nil {
			t.Fatalf("complete: %v", err)
		}
		return res
	}
	done := &store.Claim{Token: c.Token, DBTime: c.DBTime, Events: c.Events[:n-left]}
	if res := completeAs(a.RelayID, done); len(res.Applied) != n-left {
		t.Fatalf("relay a's first completion = %+v, want %d applied", res, n-left)
	}
	// Relay b joins; a gives it its surplus and renews the rest (under a
	// longer lease, so that the renewal shows); b takes the surplus.
	b := store.ClaimRequest{RelayID: "lanes-b", Limit: n, Lease: lease, FailedBlocks: true, StrictFIFO: true}
	if err := holder.BalanceLanes(ctx, b.RelayID, lease); err != nil {
		t.Fatal(err)
	}
	_, untilBefore := h.leaseEnds(t, a.RelayID)
	if err := holder.BalanceLanes(ctx, a.RelayID, 2*lease); err != nil {
		t.Fatal(err)
	}
	if err := holder.BalanceLanes(ctx, b.RelayID, lease); err != nil {
		t.Fatal(err)
	}
	heldA, heldB := holder.HeldLanes(a.RelayID), holder.HeldLanes(b.RelayID)
	all := map[int]bool{}
	for l := range heldA {
		all[l] = true
	}
	for l := range heldB {
		if all[l] {
			t.Fatalf("lane %d is held by both relays", l)
		}
		all[l] = true
	}
	if len(heldA) != lanes.Count/2 || len(heldB) != lanes.Count/2 || len(all) != lanes.Count {
		t.Fatalf("relay a holds %d lanes %v, b %d %v; want %d each, every lane held",
			len(heldA), slices.Sorted(maps.Keys(heldA)), len(heldB), slices.Sorted(maps.Keys(heldB)), lanes.Count/2)
	}
	if h.SQL != nil && h.Table != "" {
		if renewed, _ := h.leaseEnds(t, a.RelayID); renewed <= untilBefore {
			t.Fatalf("relay a's lanes were not renewed when it gave lanes up: the earliest lease ends at %d ms, no later than %d before", renewed, untilBefore)
		}
	}
	if cb, err := h.Store.Claim(ctx, b); err != nil || len(cb.Events) != 0 {
		t.Fatalf("relay b claimed %v (%v); want nothing: every event is delivered or in relay a's batch", ids(cb), err)
	}
	rest := &store.Claim{Token: c.Token, DBTime: c.DBTime, Events: c.Events[n-left:]}
	if res := completeAs(a.RelayID, rest); len(res.Applied) != left {
		t.Fatalf("relay a's last completion = %+v, want %d applied", res, left)
	}
	// Relay a stops: it gives its lanes back and leaves, so b takes every
	// lane at its next balance (a live a would keep b at half).
	if err := holder.ReleaseLanes(ctx, a.RelayID); err != nil {
		t.Fatal(err)
	}
	if err := holder.BalanceLanes(ctx, b.RelayID, lease); err != nil {
		t.Fatal(err)
	}
	if got, left := len(holder.HeldLanes(b.RelayID)), len(holder.HeldLanes(a.RelayID)); got != lanes.Count || left != 0 {
		t.Fatalf("after relay a stopped: b holds %d lanes, a %d; want b all %d", got, left, lanes.Count)
	}
	if err := holder.BalanceLanes(ctx, b.RelayID, 0); err == nil {
		t.Fatal("a balance under a lease of 0 was accepted")
	}
}

// leaseEnds returns the earliest and the latest end of the leases of the
// lanes relayID holds, in milliseconds of the database clock (0, 0 without
// SQL access to the tables).
func (h *Harness) leaseEnds(t *testing.T, relayID string) (earliest, latest int64) {
	t.Helper()
	if h.SQL == nil || h.Table == "" {
		return 0, 0
	}
	q := "SELECT COALESCE(min(lease_until_ms), 0), COALESCE(max(lease_until_ms), 0) FROM " + h.Table + "_lanes WHERE owner = ?"
	if h.Bind != nil {
		q = h.Bind(q)
	}
	if err := h.SQL.QueryRowContext(context.Background(), q, relayID).Scan(&earliest, &latest); err != nil {
		t.Fatalf("read the lanes' leases: %v", err)
	}
	return earliest, latest
}

// postgresLane is the lane PostgreSQL's insert trigger gives an aggregate:
// the first byte of md5("type:id"), modulo the lane count.
func postgresLane(aggregateType, aggregateID string) int {
	sum := md5.Sum([]byte(aggregateType + ":" + aggregateID))
	return int(sum[0]) % lanes.Count
}

// testLateCommitInOneLane: of two aggregates of one lane, the event that
// drew the lower id commits after the other was claimed and delivered. A
// lane's read position (PostgreSQL's cursor) must not have passed it.
func testLateCommitInOneLane(t *testing.T, h *Harness) {
	if h.SingleWriter {
		t.Skip("the database has one writer: a transaction cannot stay open while another commits")
	}
	ctx := context.Background()
	first := "one-lane-a"
	second := ""
	for i := 0; second == ""; i++ {
		if id := fmt.Sprintf("one-lane-b-%d", i); postgresLane("payment", id) == postgresLane("payment", first) {
			second = id
		}
	}
	// A read before the late transaction begins: the next read, which
	// sees that one's transaction ended, knows every id up to it settled
	// (PostgreSQL's horizon), but none after the late transaction's.
	if c := claim(t, h.Store, 10, time.Minute, true); len(c.Events) != 0 {
		t.Fatalf("claimed %v from an empty table", ids(c))
	}
	late, err := h.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = late.Rollback(context.Background()) })
	lateID, err := late.Enqueue(ctx, PaymentEvent(first, 1))
	if err != nil {
		t.Fatal(err)
	}
	early := Enqueue(t, h, PaymentEvent(second, 1))
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 1 || c.Events[0].EventID != early[0] {
		t.Fatalf("claim with the lower id uncommitted = %v, want only the committed event %s", ids(c), early[0])
	}
	complete(t, h.Store, c, true, outcomes(c, store.Delivered))
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var again *store.Claim
	wait.Until(t, 10*time.Second, "the late commit to be claimed", func() (bool, error) {
		var err error
		again, err = h.Store.Claim(ctx, store.ClaimRequest{RelayID: "test", Limit: 10, Lease: time.Minute, FailedBlocks: true})
		return err == nil && len(again.Events) > 0, err
	})
	if len(again.Events) != 1 || again.Events[0].EventID != lateID[0] {
		t.Fatalf("claim after the late commit = %v, want the late event %s", ids(again), lateID[0])
	}
	complete(t, h.Store, again, true, outcomes(again, store.Delivered))
}
