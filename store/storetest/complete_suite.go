package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
)

func testCompleteOutcomes(t *testing.T, h *Harness) {
	ctx := context.Background()
	Enqueue(t, h, PaymentEvent("d", 1), PaymentEvent("r", 1), PaymentEvent("f", 1), PaymentEvent("x", 1), PaymentEvent("l", 1))
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 5 {
		t.Fatalf("claimed %d, want 5", len(c.Events))
	}
	kinds := []store.OutcomeKind{store.Delivered, store.Retry, store.Failed, store.Expired, store.Released}
	outs := outcomes(c, store.Delivered)
	for i := range outs {
		outs[i].Kind = kinds[i]
		outs[i].Error = "reason " + string(kinds[i])
		if kinds[i] == store.Retry {
			outs[i].RetryIn = time.Hour
		}
		outs[i].Attempted = kinds[i] != store.Released
	}
	res := complete(t, h.Store, c, true, outs)
	if len(res.Applied) != 5 || len(res.Fenced) != 0 {
		t.Fatalf("Complete = %+v, want all 5 applied", res)
	}
	want := map[string]struct {
		status  outbox.Status
		retries int
	}{
		"d": {outbox.StatusProcessed, 0}, "r": {outbox.StatusPending, 1}, "f": {outbox.StatusFailed, 1},
		"x": {outbox.StatusExpired, 0}, "l": {outbox.StatusPending, 0},
	}
	for _, e := range c.Events {
		r, err := h.Store.GetEvent(ctx, e.EventID)
		if err != nil {
			t.Fatal(err)
		}
		w := want[e.AggregateID]
		if r.Status != w.status || r.RetryCount != w.retries {
			t.Errorf("%s: status %s retries %d, want %s %d", e.AggregateID, r.Status, r.RetryCount, w.status, w.retries)
		}
		if r.LockToken != "" || !r.LockedUntil.IsZero() {
			t.Errorf("%s: lock not cleared: %q %s", e.AggregateID, r.LockToken, r.LockedUntil)
		}
		if (w.status == outbox.StatusProcessed || w.status == outbox.StatusFailed || w.status == outbox.StatusExpired) && r.ProcessedAt.IsZero() {
			t.Errorf("%s: processed_at not set on a final row", e.AggregateID)
		}
		switch e.AggregateID {
		case "r":
			if d := r.AvailableAt.Sub(c.DBTime); d < 59*time.Minute {
				t.Errorf("retried event available in %s, want about the 1h asked", d)
			}
			if r.LastError != "reason RETRY" {
				t.Errorf("last_error = %q", r.LastError)
			}
		case "f":
			if r.LastError != "reason FAILED" {
				t.Errorf("last_error = %q", r.LastError)
			}
		}
		atts, err := h.Store.Attempts(ctx, e.EventID)
		if err != nil {
			t.Fatal(err)
		}
		wantAtt := 1
		if e.AggregateID == "l" {
			wantAtt = 0
		}
		if len(atts) != wantAtt {
			t.Errorf("%s: %d attempt rows, want %d", e.AggregateID, len(atts), wantAtt)
		} else if wantAtt == 1 && (atts[0].Outcome != kinds[indexOf(c, e.ID)] || atts[0].RelayID != "test" || atts[0].Attempt != 1 || atts[0].ClaimToken != c.Token) {
			t.Errorf("%s: attempt row %+v", e.AggregateID, atts[0])
		}
	}
	dls, err := h.Store.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].AggregateID != "f" || dls[0].Reason != "reason FAILED" || dls[0].RetryCount != 1 {
		t.Fatalf("dead letters = %+v, want the FAILED event with its reason", dls)
	}
	// The released event is claimable again at once, and keeps attempt 1.
	again := claim(t, h.Store, 10, time.Minute, true)
	if len(again.Events) != 1 || again.Events[0].AggregateID != "l" || again.Events[0].Attempt != 1 {
		t.Fatalf("re-claim = %+v, want only the released event, still attempt 1", again.Events)
	}
}

func indexOf(c *store.Claim, id int64) int {
	for i, e := range c.Events {
		if e.ID == id {
			return i
		}
	}
	return -1
}

func testCompleteFencing(t *testing.T, h *Harness) {
	ctx := context.Background()
	Enqueue(t, h, PaymentEvent("a", 1), PaymentEvent("b", 1))
	c := claim(t, h.Store, 10, time.Minute, true)
	outs := outcomes(c, store.Delivered)
	if res := complete(t, h.Store, c, true, outs); len(res.Applied) != 2 {
		t.Fatalf("first Complete = %+v", res)
	}
	// A replay (e.g. after an ambiguous commit) changes nothing and writes no second audit row.
	res := complete(t, h.Store, c, true, outs)
	if len(res.Applied) != 0 || len(res.Fenced) != 2 {
		t.Fatalf("replayed Complete = %+v, want 0 applied and 2 fenced", res)
	}
	atts, err := h.Store.Attempts(ctx, c.Events[0].EventID)
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 1 {
		t.Fatalf("after a replay: %d attempt rows, want 1", len(atts))
	}
	// A wrong token changes nothing.
	Enqueue(t, h, PaymentEvent("c", 1))
	c2 := claim(t, h.Store, 10, time.Minute, true)
	forged := *c2
	forged.Token = "00000000-0000-4000-8000-000000000000"
	res = complete(t, h.Store, &forged, true, outcomes(c2, store.Failed))
	if len(res.Applied) != 0 || len(res.Fenced) != 1 {
		t.Fatalf("Complete with a wrong token = %+v, want fenced", res)
	}
	r, err := h.Store.GetEvent(ctx, c2.Events[0].EventID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != outbox.StatusProcessing || r.RetryCount != 0 {
		t.Fatalf("after a fenced Complete the row is %s/%d, want untouched PROCESSING/0", r.Status, r.RetryCount)
	}
	// Nor does a wrong token with every outcome DELIVERED, the common case
	// (a store may write it by a faster path), alone or beside a row of
	// the forged claim's own.
	res = complete(t, h.Store, &forged, true, outcomes(c2, store.Delivered))
	if len(res.Applied) != 0 || len(res.Fenced) != 1 {
		t.Fatalf("all-delivered Complete with a wrong token = %+v, want fenced", res)
	}
	if r, err = h.Store.GetEvent(ctx, c2.Events[0].EventID); err != nil {
		t.Fatal(err)
	} else if r.Status != outbox.StatusProcessing {
		t.Fatalf("after a fenced all-delivered Complete the row is %s, want untouched PROCESSING", r.Status)
	}
	Enqueue(t, h, PaymentEvent("d", 1))
	c3 := claim(t, h.Store, 10, time.Minute, true)
	mixed := *c3
	mixed.Events = append(append([]store.Claimed(nil), c3.Events...), c2.Events...)
	res = complete(t, h.Store, &mixed, true, outcomes(&mixed, store.Delivered))
	if len(res.Applied) != 1 || len(res.Fenced) != 1 || res.Applied[0] != c3.Events[0].ID {
		t.Fatalf("all-delivered Complete of an own row and another claim's row = %+v, want the own row applied and the other fenced", res)
	}
	if r, err = h.Store.GetEvent(ctx, c2.Events[0].EventID); err != nil {
		t.Fatal(err)
	} else if r.Status != outbox.StatusProcessing {
		t.Fatalf("another claim's row is %s after an all-delivered Complete that named it, want untouched PROCESSING", r.Status)
	}
	// Its owner still completes it.
	if res := complete(t, h.Store, c2, true, outcomes(c2, store.Delivered)); len(res.Applied) != 1 {
		t.Fatalf("the owner's Complete after the forged ones = %+v, want applied", res)
	}
}

// testAbandonedBatchClaimedAgain: a relay that gives a batch up (it could
// not record it before its lease ended: the database was down) and goes on
// claiming under the same relay id gets the batch's events again, and the
// given-up batch's completion is fenced.
func testAbandonedBatchClaimedAgain(t *testing.T, h *Harness) {
	want := Enqueue(t, h, PaymentEvent("abandoned", 1), PaymentEvent("abandoned", 2))
	// A lease that ends soon, but gives a claim (which may take half of
	// it) time on a loaded shared server: 300 ms claimed nothing for 30 s
	// on MariaDB at a load of 20.
	req := store.ClaimRequest{RelayID: "abandons", Limit: 10, Lease: 2 * time.Second, FailedBlocks: true}
	old := claimShortLease(t, h.Store, &req, 2)
	// The relay lists no batch as its own any more: it gave the old one up.
	// (It claims under the same lease: a claim renews the relay's lanes,
	// and the given-up batch comes back once their lease has ended.)
	again, began := claimAgainAfterSweeps(t, h, req, "the relay to claim the given-up batch's events again", want)
	if res := complete(t, h.Store, old, true, outcomes(old, store.Delivered)); len(res.Applied) != 0 || len(res.Fenced) != 2 {
		t.Fatalf("the given-up batch's completion = %+v, want both fenced", res)
	}
	// A completion within the new claim's lease must be applied. One that
	// came after the lease ended is rightly fenced (at a load of 40 one on
	// MariaDB was fenced, most likely so: the test did not time it then):
	// the events come back once more, and the test claims them again.
	for late := 0; ; late++ {
		res := complete(t, h.Store, again, true, outcomes(again, store.Delivered))
		if len(res.Applied) == 2 {
			break
		}
		took := time.Since(began)
		if took < req.Lease || len(res.Fenced) != 2 || late == 4 {
			t.Fatalf("the new claim's completion, %s after the claim began (lease %s, %d late completions before), = %+v; want both applied",
				took.Round(time.Millisecond), req.Lease, late, res)
		}
		t.Logf("the new claim's completion came %s after the claim began, past its %s lease, and was fenced; claiming again",
			took.Round(time.Millisecond), req.Lease)
		again, began = claimAgainAfterSweeps(t, h, req, "the relay to claim the late-completed batch's events again", want)
	}
}

func testLeaseExpiryFencing(t *testing.T, h *Harness) {
	ctx := context.Background()
	Enqueue(t, h, PaymentEvent("lease", 1))
	// A lease that ends soon, but gives a claim (which may take half of
	// it) time on a loaded shared server, where a lease of 1 s can let
	// no claim through on MariaDB.
	old := claimShortLease(t, h.Store, &store.ClaimRequest{RelayID: "test", Limit: 10, Lease: 3 * time.Second, FailedBlocks: true}, 1)
	var reaped int64
	wait.Until(t, 2*time.Minute, "the reaper to return the expired lease", func() (bool, error) {
		res, err := h.Store.Sweep(ctx, store.SweepRequest{RelayID: "sweeper", FailedBlocks: true})
		reaped += res.Reaped
		return reaped == 1, err
	})
	r, err := h.Store.GetEvent(ctx, old.Events[0].EventID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != outbox.StatusPending || r.RetryCount != 0 {
		t.Fatalf("reaped row is %s with retry_count %d, want PENDING keeping retry_count 0", r.Status, r.RetryCount)
	}
	// The reaper audits the attempt whose lease ended: its number, the
	// claim token it ran under, and the sweeper that returned it.
	if atts, err := h.Store.Attempts(ctx, r.EventID); err != nil || len(atts) != 1 ||
		atts[0].Outcome != store.LeaseExpired || atts[0].Attempt != 1 || atts[0].ClaimToken != old.Token || atts[0].RelayID != "sweeper" {
		t.Fatalf("audit of the reaped attempt = %+v, %v; want one LEASE_EXPIRED row for attempt 1 under token %s by relay sweeper", atts, err, old.Token)
	}
	fresh := claim(t, h.Store, 10, time.Minute, true)
	if len(fresh.Events) != 1 {
		t.Fatalf("second relay claimed %d, want the reaped event", len(fresh.Events))
	}
	// The paused first relay wakes up and reports a failure: nothing changes.
	res := complete(t, h.Store, old, true, outcomes(old, store.Failed))
	if len(res.Applied) != 0 || len(res.Fenced) != 1 {
		t.Fatalf("stale Complete = %+v, want 0 rows affected", res)
	}
	complete(t, h.Store, fresh, true, outcomes(fresh, store.Delivered))
	r, err = h.Store.GetEvent(ctx, old.Events[0].EventID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != outbox.StatusProcessed || r.RetryCount != 0 {
		t.Fatalf("final row %s/%d, want the second relay's PROCESSED/0", r.Status, r.RetryCount)
	}
	atts, err := h.Store.Attempts(ctx, r.EventID)
	if err != nil {
		t.Fatal(err)
	}
	var outcomesSeen []string
	for _, a := range atts {
		outcomesSeen = append(outcomesSeen, string(a.Outcome))
	}
	joined := strings.Join(outcomesSeen, ",")
	if !strings.Contains(joined, "LEASE_EXPIRED") || !strings.Contains(joined, "DELIVERED") || !strings.Contains(joined, "FAILED") {
		t.Fatalf("audit trail %v should show the lease expiry, the stale failure and the delivery", outcomesSeen)
	}
	if dls, _ := h.Store.DeadLetters(ctx, 10); len(dls) != 0 {
		t.Fatalf("a fenced FAILED outcome wrote a dead letter: %+v", dls)
	}
}

func mustFind(t testing.TB, h *Harness, aggregateID string, n int) outbox.EventID {
	t.Helper()
	recs, err := h.Store.ListEvents(context.Background(), store.ListFilter{AggregateType: "payment", AggregateID: aggregateID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`"n":%d}`, n)
	for _, r := range recs {
		if strings.HasSuffix(string(r.Payload), want) {
			return r.EventID
		}
	}
	t.Fatalf("no event %s/%d", aggregateID, n)
	return outbox.EventID{}
}

func testFailedBlocks(t *testing.T, h *Harness) {
	ctx := context.Background()
	Enqueue(t, h, PaymentEvent("poison", 1), PaymentEvent("poison", 2), PaymentEvent("fine", 1))
	c := claim(t, h.Store, 1, time.Minute, true)
	if len(c.Events) != 1 || c.Events[0].AggregateID != "poison" {
		t.Fatalf("claim = %+v", c.Events)
	}
	complete(t, h.Store, c, true, outcomes(c, store.Failed))
	// A later event of the blocked aggregate arrives after the failure.
	Enqueue(t, h, PaymentEvent("poison", 3))
	got := claim(t, h.Store, 10, time.Minute, true)
	if len(got.Events) != 1 || got.Events[0].AggregateID != "fine" {
		t.Fatalf("claim after a FAILED event = %+v, want only the other aggregate", got.Events)
	}
	complete(t, h.Store, got, true, outcomes(got, store.Delivered))
	if _, err := h.Store.Sweep(ctx, store.SweepRequest{FailedBlocks: true}); err != nil {
		t.Fatal(err)
	}
	st, err := h.Store.Stats(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[outbox.StatusBlocked] != 2 || st.Counts[outbox.StatusFailed] != 1 || st.DeadLetters != 1 {
		t.Fatalf("counts %v, dead letters %d; want 2 BLOCKED, 1 FAILED, 1 dead letter", st.Counts, st.DeadLetters)
	}
	if st.BlockedAggregateCount != 1 || len(st.BlockedAggregates) != 1 || st.BlockedAggregates[0].AggregateID != "poison" ||
		st.BlockedAggregates[0].Waiting != 2 || st.BlockedAggregates[0].FailedEventID != c.Events[0].EventID {
		t.Fatalf("blocked aggregates = %+v (count %d)", st.BlockedAggregates, st.BlockedAggregateCount)
	}
	if n, err := h.Store.CountMovable(ctx, true); err != nil || n != 0 {
		t.Fatalf("CountMovable = %d, %v; want 0 (all that is left waits for an operator)", n, err)
	}
	// Requeueing a PROCESSED event is refused.
	if err := h.Store.Requeue(ctx, store.OperatorAction{EventID: got.Events[0].EventID, Actor: "alice"}); !errors.Is(err, outbox.ErrConflict) {
		t.Fatalf("requeue of a PROCESSED event: %v, want ErrConflict", err)
	}
	if err := h.Store.Requeue(ctx, store.OperatorAction{EventID: outbox.NewEventID()}); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("requeue of an unknown event: %v, want ErrNotFound", err)
	}
	// Skip the poison event: the aggregate moves on, in order.
	if err := h.Store.Skip(ctx, store.OperatorAction{EventID: c.Events[0].EventID, Actor: "alice", Reason: "merchant fixed by hand"}); err != nil {
		t.Fatal(err)
	}
	rest := claim(t, h.Store, 10, time.Minute, true)
	if len(rest.Events) != 2 || rest.Events[0].AggregateID != "poison" || rest.Events[0].ID >= rest.Events[1].ID {
		t.Fatalf("after skip, claim = %+v; want the two waiting poison events in order", rest.Events)
	}
	r, err := h.Store.GetEvent(ctx, c.Events[0].EventID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != outbox.StatusSkipped {
		t.Fatalf("skipped event is %s", r.Status)
	}
	atts, err := h.Store.Attempts(ctx, r.EventID)
	if err != nil {
		t.Fatal(err)
	}
	last := atts[len(atts)-1]
	if last.Outcome != store.Skipped || last.RelayID != "operator:alice" || !strings.Contains(last.Error, "merchant fixed by hand") {
		t.Fatalf("audit of the skip = %+v", last)
	}
}

func testFailedContinue(t *testing.T, h *Harness) {
	Enqueue(t, h, PaymentEvent("p", 1), PaymentEvent("p", 2))
	c := claim(t, h.Store, 1, time.Minute, false)
	complete(t, h.Store, c, false, outcomes(c, store.Failed))
	next := claim(t, h.Store, 10, time.Minute, false)
	if len(next.Events) != 1 || next.Events[0].AggregateID != "p" {
		t.Fatalf("with FAILED not blocking, claim = %+v; want the next event of the aggregate", next.Events)
	}
	if n := CountStatus(t, h.Store, outbox.StatusBlocked); n != 0 {
		t.Fatalf("%d BLOCKED with the continue policy", n)
	}
}

func testExpiry(t *testing.T, h *Harness) {
	ctx := context.Background()
	past := outbox.Event{AggregateType: "payment", AggregateID: "qr", EventType: "ApprovalRequested", Payload: []byte(`{}`),
		ExpiresAt: time.Now().Add(-time.Second)}
	Enqueue(t, h, past)
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 1 || !c.Events[0].Expired {
		t.Fatalf("claim of an expired event = %+v, want it flagged Expired", c.Events)
	}
	// Waiting events (BLOCKED behind a FAILED one) expire through the sweeper.
	Enqueue(t, h, PaymentEvent("held", 1))
	f := claim(t, h.Store, 10, time.Minute, true)
	complete(t, h.Store, f, true, outcomes(f, store.Failed))
	short := PaymentEvent("held", 2)
	short.TTL = 100 * time.Millisecond
	Enqueue(t, h, short)
	var expired int64
	wait.Until(t, 10*time.Second, "the sweeper to expire the waiting event", func() (bool, error) {
		res, err := h.Store.Sweep(ctx, store.SweepRequest{FailedBlocks: true})
		expired += res.Expired
		return expired == 1, err
	})
	r, err := h.Store.GetEvent(ctx, mustFind(t, h, "held", 2))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != outbox.StatusExpired || !strings.Contains(r.LastError, "expired") {
		t.Fatalf("waiting event after its deadline: %s %q", r.Status, r.LastError)
	}
	atts, err := h.Store.Attempts(ctx, r.EventID)
	if err != nil || len(atts) != 1 || atts[0].Outcome != store.Expired || atts[0].Attempt != 1 || atts[0].ClaimToken == "" {
		t.Fatalf("audit of an expiry = %+v, %v; want one EXPIRED row for attempt 1 (the one that would have come next) with a token of its own", atts, err)
	}
}

func testRequeueExpired(t *testing.T, h *Harness) {
	ctx := context.Background()
	e := PaymentEvent("qr", 1)
	e.ExpiresAt = time.Now().Add(-time.Second)
	id := Enqueue(t, h, e)[0]
	c := claim(t, h.Store, 10, time.Minute, true)
	complete(t, h.Store, c, true, outcomes(c, store.Expired))
	if err := h.Store.Requeue(ctx, store.OperatorAction{EventID: id, Actor: "bob"}); err != nil {
		t.Fatal(err)
	}
	r, err := h.Store.GetEvent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != outbox.StatusPending || !r.ExpiresAt.IsZero() {
		t.Fatalf("requeued EXPIRED event: %s expires %s; want PENDING with the past deadline removed", r.Status, r.ExpiresAt)
	}
	again := claim(t, h.Store, 10, time.Minute, true)
	if len(again.Events) != 1 || again.Events[0].Expired {
		t.Fatalf("requeued event claim = %+v", again.Events)
	}
	complete(t, h.Store, again, true, outcomes(again, store.Expired))
	if err := h.Store.Requeue(ctx, store.OperatorAction{EventID: id, Actor: "bob", NewTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if r, _ = h.Store.GetEvent(ctx, id); r.ExpiresAt.IsZero() || r.ExpiresAt.Before(time.Now().Add(30*time.Second)) {
		t.Fatalf("requeue with a new TTL of 1m: expires_at %s", r.ExpiresAt)
	}
}

func testPurge(t *testing.T, h *Harness) {
	ctx := context.Background()
	Enqueue(t, h, PaymentEvent("a", 1), PaymentEvent("b", 1), PaymentEvent("c", 1))
	c := claim(t, h.Store, 2, time.Minute, true)
	complete(t, h.Store, c, true, outcomes(c, store.Delivered))
	n, err := h.Store.Purge(ctx, store.PurgeRequest{OlderThan: time.Hour})
	if err != nil || n != 0 {
		t.Fatalf("purge of rows younger than the retention = %d, %v; want 0", n, err)
	}
	n, err = h.Store.Purge(ctx, store.PurgeRequest{OlderThan: 0, BatchSize: 1})
	if err != nil || n != 2 {
		t.Fatalf("purge with no retention = %d, %v; want the 2 PROCESSED rows", n, err)
	}
	st, err := h.Store.Stats(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[outbox.StatusProcessed] != 0 || st.Counts[outbox.StatusPending] != 1 {
		t.Fatalf("after purge: %v", st.Counts)
	}
	if atts, _ := h.Store.Attempts(ctx, c.Events[0].EventID); len(atts) != 0 {
		t.Fatalf("purged event kept %d audit rows", len(atts))
	}
	if _, err := h.Store.Purge(ctx, store.PurgeRequest{Statuses: []outbox.Status{outbox.StatusPending}}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("purge of PENDING rows: %v, want refused", err)
	}
	// A table that outbox created is not adopted: a purge keeps no history
	// of its own, with or without PurgeRequest.Adopted.
	if ar := h.Store.Features().AdoptionReporter; ar != nil {
		if at, adopted, err := ar.AdoptedAt(ctx); err != nil || adopted {
			t.Fatalf("AdoptedAt on a table outbox created = %v, %v, %v; want not adopted", at, adopted, err)
		}
	}
	c = claim(t, h.Store, 1, time.Minute, true)
	complete(t, h.Store, c, true, outcomes(c, store.Delivered))
	if n, err := h.Store.Purge(ctx, store.PurgeRequest{Adopted: true}); err != nil || n != 1 {
		t.Fatalf("purge with Adopted on a table outbox created = %d, %v; want the PROCESSED row", n, err)
	}
}
