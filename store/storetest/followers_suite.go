package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// RunStoreGuarantees checks, on the Store contract directly, what a
// completion does to the events behind it: events piled up behind a FAILED
// or retried head are held back by the claim itself and never starve the
// other aggregates, followers wait for the latest retry, a FAILED outcome
// blocks its followers at once, the sweep alone blocks and unblocks, and
// the attempt rows tell a fenced attempt from an applied one. Each test
// names the behaviour it pins down.
func RunStoreGuarantees(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"PileBehindFailedDoesNotStarveOthers", testPileBehindFailed},
		{"AttemptRowsTellFencedFromApplied", testAttemptRowsFencedApplied},
		{"FollowersWaitForTheLatestRetry", testFollowersWaitForLatestRetry},
		{"FailedCompleteBlocksFollowersAtOnce", testFailedBlocksAtOnce},
		{"PileBehindHeadWhileOwnBatchInFlightDoesNotStarveOthers", testPileBehindHeadWhileOwnInFlight},
		{"SweepAloneBlocksAndUnblocks", testSweepAloneBlocksAndUnblocks},
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
	Enqueue(t, h, PaymentEvent("poisoned", 1))
	c := claim(t, h.Store, 2, time.Minute, true)
	complete(t, h.Store, c, true, outcomes(c, store.Failed))
	Enqueue(t, h, PaymentEvent("poisoned", 2), PaymentEvent("poisoned", 3), PaymentEvent("poisoned", 4), PaymentEvent("poisoned", 5))
	other := Enqueue(t, h, PaymentEvent("healthy", 1))[0]
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
	if n := CountStatus(t, h.Store, outbox.StatusBlocked); n != 4 {
		t.Fatalf("%d events BLOCKED after the claims, want the 4 behind the FAILED head", n)
	}
}

// testAttemptRowsFencedApplied: the audit row of an attempt whose row was
// fenced says that the lease was lost, after the attempt's own error when
// it had one; the audit row of an applied outcome keeps the error as it is,
// and a delivery has none.
func testAttemptRowsFencedApplied(t *testing.T, h *Harness) {
	ctx := context.Background()
	Enqueue(t, h, PaymentEvent("fenced-a", 1), PaymentEvent("fenced-b", 1))
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 2 {
		t.Fatalf("claimed %d events, want 2", len(c.Events))
	}
	forged := *c
	forged.Token = "00000000-0000-4000-8000-000000000000"
	outs := outcomes(&forged, store.Delivered)
	outs[0].Kind, outs[0].Error = store.Failed, "boom"
	if res := complete(t, h.Store, &forged, true, outs); len(res.Applied) != 0 || len(res.Fenced) != 2 {
		t.Fatalf("Complete with a wrong token = %+v, want both fenced", res)
	}
	outs = outcomes(c, store.Delivered)
	outs[0].Kind, outs[0].Error, outs[0].RetryIn = store.Retry, "try again", time.Hour
	if res := complete(t, h.Store, c, true, outs); len(res.Applied) != 2 {
		t.Fatalf("the owner's Complete = %+v, want both applied", res)
	}
	want := map[outbox.EventID]map[string]string{
		c.Events[0].EventID: {forged.Token: "boom; " + backend.LeaseLost, c.Token: "try again"},
		c.Events[1].EventID: {forged.Token: backend.LeaseLost, c.Token: ""},
	}
	for id, byToken := range want {
		atts, err := h.Store.Attempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(atts) != 2 {
			t.Fatalf("event %s: %d attempt rows, want 2 (the fenced one and the applied one): %+v", id, len(atts), atts)
		}
		for _, a := range atts {
			w, ok := byToken[a.ClaimToken]
			if !ok {
				t.Fatalf("event %s: an attempt row under token %q, which completed nothing", id, a.ClaimToken)
			}
			if a.Error != w {
				t.Errorf("event %s, token %s: attempt error %q, want %q", id, a.ClaimToken, a.Error, w)
			}
		}
	}
}

// testFollowersWaitForLatestRetry: when several events of one aggregate
// are retried by one completion, the events behind them wait for the
// latest of their retries, not the first.
func testFollowersWaitForLatestRetry(t *testing.T, h *Harness) {
	Enqueue(t, h, PaymentEvent("twice", 1), PaymentEvent("twice", 2))
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 2 {
		t.Fatalf("claimed %d events, want the run of 2", len(c.Events))
	}
	Enqueue(t, h, PaymentEvent("twice", 3))
	outs := outcomes(c, store.Retry)
	outs[0].RetryIn, outs[1].RetryIn = time.Minute, time.Hour
	complete(t, h.Store, c, true, outs)
	r, err := h.Store.GetEvent(context.Background(), mustFind(t, h, "twice", 3))
	if err != nil {
		t.Fatal(err)
	}
	if d := r.AvailableAt.Sub(c.DBTime); d < 59*time.Minute {
		t.Errorf("the follower of two retried events is available in %s; want it pushed back with the later retry (1h)", d)
	}
}

// testFailedBlocksAtOnce: the completion that records a FAILED event
// moves the events waiting behind it to BLOCKED in the same transaction
// (no sweep runs here), with the FAILED-blocks policy only, whether or not
// it also retries an event; a retried event of the same completion still
// pushes its own followers back.
func testFailedBlocksAtOnce(t *testing.T, h *Harness) {
	ctx := context.Background()
	for _, tc := range []struct{ blocks, retry bool }{{true, false}, {true, true}, {false, true}} {
		name := fmt.Sprintf("FailedBlocks=%t, with a retry %t", tc.blocks, tc.retry)
		poisoned, retried := fmt.Sprintf("poisoned-%t-%t", tc.blocks, tc.retry), fmt.Sprintf("retried-%t-%t", tc.blocks, tc.retry)
		first := []outbox.Event{PaymentEvent(poisoned, 1)}
		if tc.retry {
			first = append(first, PaymentEvent(retried, 1))
		}
		Enqueue(t, h, first...)
		c := claim(t, h.Store, 10, time.Minute, tc.blocks)
		if len(c.Events) != len(first) {
			t.Fatalf("%s: claimed %d events, want %d", name, len(c.Events), len(first))
		}
		behindFirst := []outbox.Event{PaymentEvent(poisoned, 2)}
		if tc.retry {
			behindFirst = append(behindFirst, PaymentEvent(retried, 2))
		}
		Enqueue(t, h, behindFirst...)
		outs := outcomes(c, store.Failed)
		for i, e := range c.Events {
			if e.AggregateID == retried {
				outs[i].Kind, outs[i].RetryIn = store.Retry, time.Hour
			}
		}
		complete(t, h.Store, c, tc.blocks, outs)
		behind, err := h.Store.GetEvent(ctx, mustFind(t, h, poisoned, 2))
		if err != nil {
			t.Fatal(err)
		}
		want := outbox.StatusPending
		if tc.blocks {
			want = outbox.StatusBlocked
		}
		if behind.Status != want {
			t.Errorf("%s: the event behind a FAILED one is %s right after the completion, want %s", name, behind.Status, want)
		}
		if !tc.retry {
			continue
		}
		follower, err := h.Store.GetEvent(ctx, mustFind(t, h, retried, 2))
		if err != nil {
			t.Fatal(err)
		}
		if d := follower.AvailableAt.Sub(c.DBTime); d < 59*time.Minute {
			t.Errorf("%s: the follower of a retried event is available in %s, want it pushed back with its head (1h)", name, d)
		}
	}
}

// testPileBehindHeadWhileOwnInFlight is testPileBehindFailed for a relay
// that pipelines: the aggregate's first event ends FAILED (or is retried
// in an hour) while the relay's next batch of the aggregate is still in
// flight under a claim of its own. The events enqueued behind it after
// that are still held back by the claim itself (BLOCKED behind the FAILED
// head, or pushed back to the retried head's time), so however many pile
// up they never fill the window of the relay's next claims, and the other
// aggregates are reached.
func testPileBehindHeadWhileOwnInFlight(t *testing.T, h *Harness) {
	if !h.Store.Features().ClaimBehindOwn {
		t.Skip("the store does not declare ClaimBehindOwn: its relay never claims behind its own batch")
	}
	ctx := context.Background()
	for _, kind := range []store.OutcomeKind{store.Failed, store.Retry} {
		piled, healthy := "piled-"+string(kind), "healthy-"+string(kind)
		Enqueue(t, h, PaymentEvent(piled, 1), PaymentEvent(piled, 2))
		first := claimWith(t, h.Store, store.ClaimRequest{Limit: 1})
		second := claimWith(t, h.Store, store.ClaimRequest{Limit: 1, Own: []string{first.Token}})
		if len(first.Events) != 1 || len(second.Events) != 1 || second.Events[0].ID <= first.Events[0].ID {
			t.Fatalf("%s: pipelined claims took %d and %d events, want the aggregate's first, then its second", kind, len(first.Events), len(second.Events))
		}
		outs := outcomes(first, kind)
		outs[0].RetryIn = time.Hour
		complete(t, h.Store, first, true, outs)
		pile := []outbox.Event{PaymentEvent(piled, 3), PaymentEvent(piled, 4), PaymentEvent(piled, 5), PaymentEvent(piled, 6)}
		Enqueue(t, h, pile...)
		other := Enqueue(t, h, PaymentEvent(healthy, 1))[0]
		reached := false
		for i := 0; i < 5 && !reached; i++ {
			got := claimWith(t, h.Store, store.ClaimRequest{Limit: 2, Own: []string{second.Token}})
			for _, e := range got.Events {
				if e.AggregateID == piled {
					t.Fatalf("%s: claimed %s/%d behind a head that is not delivered", kind, e.AggregateID, e.ID)
				}
				reached = reached || e.EventID == other
			}
		}
		if !reached {
			t.Fatalf("%s: 5 claims with a window of 2, the relay's own batch in flight, never reached the other aggregate's event queued behind the pile", kind)
		}
		for n := 3; n <= 6; n++ {
			r, err := h.Store.GetEvent(ctx, mustFind(t, h, piled, n))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case kind == store.Failed && r.Status != outbox.StatusBlocked:
				t.Errorf("%s: event %d of the pile is %s, want BLOCKED behind the FAILED head", kind, n, r.Status)
			case kind == store.Retry && (r.Status != outbox.StatusPending || r.AvailableAt.Sub(first.DBTime) < 59*time.Minute):
				t.Errorf("%s: event %d of the pile is %s, available at %s; want PENDING, pushed back to its head's retry in an hour (claimed at %s)",
					kind, n, r.Status, r.AvailableAt, first.DBTime)
			}
		}
	}
}

// testSweepAloneBlocksAndUnblocks: the sweep's block and unblock pages on
// their own, with no claim to do it for them. An event enqueued behind a
// FAILED head after the failure was recorded waits PENDING until a claim
// or a sweep under the blocking policy moves it to BLOCKED; after a switch
// to the continue policy, only a sweep moves the BLOCKED events back to
// PENDING (no claim reads BLOCKED rows).
func testSweepAloneBlocksAndUnblocks(t *testing.T, h *Harness) {
	ctx := context.Background()
	Enqueue(t, h, PaymentEvent("sweep-poison", 1), PaymentEvent("sweep-poison", 2))
	c := claim(t, h.Store, 1, time.Minute, true)
	if len(c.Events) != 1 {
		t.Fatalf("claim = %+v, want the aggregate's head alone", c.Events)
	}
	complete(t, h.Store, c, true, outcomes(c, store.Failed))
	Enqueue(t, h, PaymentEvent("sweep-poison", 3))
	if n := CountStatus(t, h.Store, outbox.StatusPending); n != 1 {
		t.Fatalf("%d PENDING after the failure, want the one enqueued after it", n)
	}
	if n, err := h.Store.CountMovable(ctx, true); err != nil || n != 0 {
		t.Fatalf("CountMovable(blocking) = %d, %v; want 0 (the PENDING event is held back)", n, err)
	}
	sweep := func(failedBlocks bool) store.SweepResult {
		t.Helper()
		res, err := h.Store.Sweep(ctx, store.SweepRequest{FailedBlocks: failedBlocks})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := sweep(true); res.Blocked != 1 || res.Unblocked != 0 {
		t.Fatalf("sweep under the blocking policy = %+v, want 1 blocked", res)
	}
	if n := CountStatus(t, h.Store, outbox.StatusBlocked); n != 2 {
		t.Fatalf("%d BLOCKED after the sweep, want both events behind the FAILED head", n)
	}
	if res := sweep(false); res.Unblocked != 2 || res.Blocked != 0 {
		t.Fatalf("sweep under the continue policy = %+v, want 2 unblocked", res)
	}
	if n := CountStatus(t, h.Store, outbox.StatusPending); n != 2 {
		t.Fatalf("%d PENDING after the switch to the continue policy, want 2", n)
	}
	next := claim(t, h.Store, 10, time.Minute, false)
	if len(next.Events) != 2 || next.Events[0].ID >= next.Events[1].ID {
		t.Fatalf("claim after the unblock = %+v, want events 2 and 3 in order", next.Events)
	}
}
