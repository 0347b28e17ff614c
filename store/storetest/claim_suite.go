package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
)

func testClaimExclusivity(t *testing.T, h *Harness) {
	var events []outbox.Event
	for i := 0; i < 9; i++ {
		events = append(events, PaymentEvent(fmt.Sprintf("agg-%d", i%3), i))
	}
	all := Enqueue(t, h, events...)
	first := claim(t, h.Store, 3, time.Minute, true)
	if len(first.Events) != 3 {
		t.Fatalf("first claim got %d events, want 3 (the window)", len(first.Events))
	}
	for i, e := range first.Events {
		if e.EventID != all[i] || e.Attempt != 1 || e.Expired {
			t.Errorf("claimed[%d] = %s attempt %d, want %s attempt 1 in id order", i, e.EventID, e.Attempt, all[i])
		}
	}
	if first.Token == "" || first.DBTime.IsZero() || !first.LockedUntil.After(first.DBTime) {
		t.Errorf("claim token %q, db time %s, locked until %s", first.Token, first.DBTime, first.LockedUntil)
	}
	// Every aggregate now has a PROCESSING head: a second relay gets nothing.
	if second := claim(t, h.Store, 100, time.Minute, true); len(second.Events) != 0 {
		t.Fatalf("second claim took %v while earlier events of their aggregates are PROCESSING", ids(second))
	}
	complete(t, h.Store, first, true, outcomes(first, store.Delivered))
	third := claim(t, h.Store, 100, time.Minute, true)
	if len(third.Events) != 6 {
		t.Fatalf("after the first batch completed, claim got %d events, want the remaining 6", len(third.Events))
	}
	if n := CountStatus(t, h.Store, outbox.StatusProcessed); n != 3 {
		t.Errorf("%d PROCESSED, want 3", n)
	}
}

func testClaimRun(t *testing.T, h *Harness) {
	var events []outbox.Event
	for i := 0; i < 5; i++ {
		events = append(events, PaymentEvent("one", i))
	}
	Enqueue(t, h, events...)
	c := claim(t, h.Store, 3, time.Minute, true)
	if len(c.Events) != 3 {
		t.Fatalf("claimed %d of one aggregate's events, want 3 in one claim", len(c.Events))
	}
	for i := 1; i < len(c.Events); i++ {
		if c.Events[i].ID <= c.Events[i-1].ID {
			t.Fatalf("claim not in id order: %v", ids(c))
		}
	}
	if other := claim(t, h.Store, 10, time.Minute, true); len(other.Events) != 0 {
		t.Fatalf("a second claim took %v of an aggregate whose run is PROCESSING", ids(other))
	}
}

// testClaimBehindOwn: a relay may claim the next events of an aggregate
// behind its own claim still in flight (pipelining); nobody else may.
func testClaimBehindOwn(t *testing.T, h *Harness) {
	if !h.Store.Features().ClaimBehindOwn {
		t.Skip("the store does not declare ClaimBehindOwn")
	}
	var events []outbox.Event
	for i := 0; i < 6; i++ {
		events = append(events, PaymentEvent("pipe", i))
	}
	Enqueue(t, h, events...)
	first := claim(t, h.Store, 2, time.Minute, true)
	if len(first.Events) != 2 {
		t.Fatalf("first claim: %d events", len(first.Events))
	}
	if other := claim(t, h.Store, 10, time.Minute, true); len(other.Events) != 0 {
		t.Fatalf("another relay claimed %v behind a claim in flight", ids(other))
	}
	next, err := h.Store.Claim(context.Background(), store.ClaimRequest{RelayID: "test", Limit: 2, Lease: time.Minute,
		FailedBlocks: true, Own: []string{first.Token}})
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Events) != 2 || next.Events[0].ID <= first.Events[1].ID {
		t.Fatalf("claim behind its own batch = %v, want the next 2 events after %v", ids(next), ids(first))
	}
	// Once the first batch is recorded, a plain claim continues after both.
	complete(t, h.Store, first, true, outcomes(first, store.Delivered))
	if other := claim(t, h.Store, 10, time.Minute, true); len(other.Events) != 0 {
		t.Fatalf("claimed %v while the second batch is in flight", ids(other))
	}
	complete(t, h.Store, next, true, outcomes(next, store.Delivered))
	if rest := claim(t, h.Store, 10, time.Minute, true); len(rest.Events) != 2 {
		t.Fatalf("after both batches: claimed %d, want the last 2", len(rest.Events))
	}

	// An event given back while a later batch of its aggregate is still in
	// flight stops the aggregate for this relay too: neither it nor what
	// follows the batch in flight may be claimed.
	Enqueue(t, h, PaymentEvent("back", 1), PaymentEvent("back", 2), PaymentEvent("back", 3))
	b1 := claim(t, h.Store, 1, time.Minute, true)
	b2, err := h.Store.Claim(context.Background(), store.ClaimRequest{RelayID: "test", Limit: 1, Lease: time.Minute,
		FailedBlocks: true, Own: []string{b1.Token}})
	if err != nil || len(b2.Events) != 1 || b2.Events[0].ID <= b1.Events[0].ID {
		t.Fatalf("second batch behind the first = %+v, %v", b2, err)
	}
	complete(t, h.Store, b1, true, outcomes(b1, store.Released))
	b3, err := h.Store.Claim(context.Background(), store.ClaimRequest{RelayID: "test", Limit: 10, Lease: time.Minute,
		FailedBlocks: true, Own: []string{b2.Token}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range b3.Events {
		if e.AggregateID == "back" {
			t.Fatalf("claimed back/%d while the given-back event %d precedes the batch in flight", e.ID, b1.Events[0].ID)
		}
	}
}

func testRetryDefersFollowers(t *testing.T, h *Harness) {
	Enqueue(t, h, PaymentEvent("x", 1))
	c := claim(t, h.Store, 10, time.Minute, true)
	// A follower arrives while the head is in flight.
	Enqueue(t, h, PaymentEvent("x", 2), PaymentEvent("y", 1))
	outs := outcomes(c, store.Retry)
	outs[0].RetryIn = time.Hour
	complete(t, h.Store, c, true, outs)
	next := claim(t, h.Store, 10, time.Minute, true)
	if len(next.Events) != 1 || next.Events[0].AggregateID != "y" {
		t.Fatalf("claim after a retry = %v, want only the other aggregate's event", next.Events)
	}
	r, err := h.Store.GetEvent(context.Background(), mustFind(t, h, "x", 2))
	if err != nil {
		t.Fatal(err)
	}
	if d := r.AvailableAt.Sub(c.DBTime); d < 59*time.Minute {
		t.Errorf("the follower of a retried event is available in %s; want it pushed back with its head (1h)", d)
	}
}

// testRetriedHeadNotStarved: events that arrive while their aggregate's head
// is in backoff are due before the head; the claim must still start the
// aggregate at its head once the head is due, even with a window of one.
func testRetriedHeadNotStarved(t *testing.T, h *Harness) {
	head := Enqueue(t, h, PaymentEvent("x", 1))[0]
	c := claim(t, h.Store, 10, time.Minute, true)
	outs := outcomes(c, store.Retry)
	outs[0].RetryIn = 200 * time.Millisecond
	complete(t, h.Store, c, true, outs)
	Enqueue(t, h, PaymentEvent("x", 2), PaymentEvent("x", 3))
	var got *store.Claim
	wait.Until(t, 10*time.Second, "the retried head to be claimed again", func() (bool, error) {
		got = claim(t, h.Store, 1, time.Minute, true)
		return len(got.Events) > 0, nil
	})
	if got.Events[0].EventID != head || got.Events[0].Attempt != 2 {
		t.Fatalf("claim with a window of 1 returned %s attempt %d, want the retried head at attempt 2", got.Events[0].EventID, got.Events[0].Attempt)
	}
}

// testPileBehindBackoff: more events than the claim window pile up behind
// a head in backoff; another aggregate's event queued after them is still
// reached within a few claims.
func testPileBehindBackoff(t *testing.T, h *Harness) {
	Enqueue(t, h, PaymentEvent("s", 1))
	c := claim(t, h.Store, 2, time.Minute, true)
	outs := outcomes(c, store.Retry)
	outs[0].RetryIn = time.Hour
	complete(t, h.Store, c, true, outs)
	Enqueue(t, h, PaymentEvent("s", 2), PaymentEvent("s", 3), PaymentEvent("s", 4), PaymentEvent("s", 5))
	other := Enqueue(t, h, PaymentEvent("t", 1))[0]
	for i := 0; i < 5; i++ {
		got := claim(t, h.Store, 2, time.Minute, true)
		for _, e := range got.Events {
			if e.AggregateID == "s" {
				t.Fatalf("claimed %s/%d behind a head in backoff", e.AggregateID, e.ID)
			}
			if e.EventID == other {
				return
			}
		}
	}
	t.Fatal("5 claims with a window of 2 never reached the other aggregate's event queued behind the pile")
}

// testLateCommit: writers hold their transactions open and commit in a
// shuffled order while claims run; no committed event is ever skipped.
func testLateCommit(t *testing.T, h *Harness) {
	ctx := context.Background()
	writers := 8
	if h.SingleWriter {
		writers = 1
	}
	rounds := 5
	want := map[outbox.EventID]bool{}
	got := map[outbox.EventID]bool{}
	drainOnce := func() {
		c := claim(t, h.Store, 1000, time.Minute, true)
		for _, e := range c.Events {
			got[e.EventID] = true
		}
		complete(t, h.Store, c, true, outcomes(c, store.Delivered))
	}
	for round := 0; round < rounds; round++ {
		txs := make([]Tx, writers)
		for w := range txs {
			tx, err := h.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// A test that fails with writers open must not leave their
			// locks to the cleanup that drops the tables.
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			id, err := tx.Enqueue(ctx, PaymentEvent(fmt.Sprintf("late-%d-%d", round, w), w))
			if err != nil {
				t.Fatal(err)
			}
			want[id[0]] = true
			txs[w] = tx
		}
		// Commit in reverse order (highest id first), claiming in between,
		// so that a claim sees a higher id before a lower one commits.
		for w := writers - 1; w >= 0; w-- {
			if err := txs[w].Commit(ctx); err != nil {
				t.Fatal(err)
			}
			drainOnce()
		}
	}
	drainOnce()

	// The newest transaction commits last: while it is open, claims see
	// nothing of it (and no transaction ends in between that a claim
	// could take for a sign that it ended too).
	if !h.SingleWriter {
		tx, err := h.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		id, err := tx.Enqueue(ctx, PaymentEvent("late-newest", 1))
		if err != nil {
			t.Fatal(err)
		}
		want[id[0]] = true
		for range 3 {
			drainOnce()
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	drainOnce()
	for id := range want {
		if !got[id] {
			t.Errorf("event %s committed late was never claimed", id)
		}
	}
	if len(got) != len(want) {
		t.Errorf("claimed %d events, want %d", len(got), len(want))
	}
}
