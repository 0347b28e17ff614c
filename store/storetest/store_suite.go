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

// RunStore checks the Store contract directly.
func RunStore(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"MigrateIdempotentAndReversible", testMigrate},
		{"CommitVisibleRollbackInvisible", testCommitRollback},
		{"BadInputWritesNothing", testBadInput},
		{"EnqueueFields", testEnqueueFields},
		{"ClaimOrderAndExclusivity", testClaimExclusivity},
		{"ClaimRunOfOneAggregate", testClaimRun},
		{"ClaimBehindOwnInFlight", testClaimBehindOwn},
		{"CompleteOutcomes", testCompleteOutcomes},
		{"CompleteReplayAndFencing", testCompleteFencing},
		{"LeaseExpiryFencesOldClaim", testLeaseExpiryFencing},
		{"RetryBacksOffFollowers", testRetryDefersFollowers},
		{"RetriedHeadNotStarvedByNewerFollowers", testRetriedHeadNotStarved},
		{"PileBehindBackoffDoesNotStarveOthers", testPileBehindBackoff},
		{"FailedBlocksAggregate", testFailedBlocks},
		{"FailedContinuePolicy", testFailedContinue},
		{"Expiry", testExpiry},
		{"RequeueExpiredClearsDeadline", testRequeueExpired},
		{"Purge", testPurge},
		{"LateCommitNeverSkipped", testLateCommit},
		{"ListAndGet", testListAndGet},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

func claim(t testing.TB, s store.Store, limit int, lease time.Duration, failedBlocks bool) *store.Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), store.ClaimRequest{RelayID: "test", Limit: limit, Lease: lease, FailedBlocks: failedBlocks})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return c
}

func outcomes(c *store.Claim, kind store.OutcomeKind) []store.Outcome {
	out := make([]store.Outcome, len(c.Events))
	for i, e := range c.Events {
		out[i] = store.Outcome{ID: e.ID, EventID: e.EventID, Kind: kind, Attempt: e.Attempt, Attempted: true,
			StartedAt: c.DBTime, FinishedAt: c.DBTime}
		if kind != store.Delivered {
			out[i].Error = "test " + strings.ToLower(string(kind))
		}
	}
	return out
}

func complete(t testing.TB, s store.Store, c *store.Claim, failedBlocks bool, outs []store.Outcome) store.CompleteResult {
	t.Helper()
	res, err := s.Complete(context.Background(), store.CompleteRequest{Token: c.Token, RelayID: "test", FailedBlocks: failedBlocks, Outcomes: outs})
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	return res
}

func ids(c *store.Claim) []int64 {
	out := make([]int64, len(c.Events))
	for i, e := range c.Events {
		out[i] = e.ID
	}
	return out
}

func testMigrate(t *testing.T, h *Harness) {
	ctx := context.Background()
	applied, err := h.Store.MigrateUp(ctx)
	if err != nil {
		t.Fatalf("second MigrateUp: %v", err)
	}
	if len(applied) != 0 {
		t.Fatalf("second MigrateUp applied %v, want nothing", applied)
	}
	cur, latest, err := h.Store.MigrationVersion(ctx)
	if err != nil || cur != latest || cur < 1 {
		t.Fatalf("MigrationVersion = %d, %d, %v; want current == latest >= 1", cur, latest, err)
	}
	Enqueue(t, h, PaymentEvent("m-1", 1))
	if err := h.Store.MigrateDown(ctx); err != nil {
		t.Fatalf("MigrateDown: %v", err)
	}
	if _, err := h.Store.Stats(ctx, true); err == nil {
		t.Fatal("Stats after MigrateDown succeeded; the table should be gone")
	} else if !strings.Contains(err.Error(), "outbox migrate") {
		t.Errorf("error on a missing table should tell to run `outbox migrate`, got: %v", err)
	}
	if applied, err := h.Store.MigrateUp(ctx); err != nil || len(applied) == 0 {
		t.Fatalf("MigrateUp after down = %v, %v; want the migrations applied again", applied, err)
	}
	Enqueue(t, h, PaymentEvent("m-1", 2))
	if n := CountStatus(t, h.Store, outbox.StatusPending); n != 1 {
		t.Fatalf("after up/down/up and one enqueue: %d PENDING, want 1", n)
	}
}

func testCommitRollback(t *testing.T, h *Harness) {
	ctx := context.Background()
	tx, err := h.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Enqueue(ctx, PaymentEvent("rb", 1), PaymentEvent("rb", 2)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	committed := Enqueue(t, h, PaymentEvent("ok", 1))
	c := claim(t, h.Store, 100, time.Minute, true)
	if len(c.Events) != 1 || c.Events[0].EventID != committed[0] {
		t.Fatalf("claimed %d events, want exactly the committed one", len(c.Events))
	}
}

func testBadInput(t *testing.T, h *Harness) {
	ctx := context.Background()
	big := make([]byte, outbox.DefaultMaxPayloadBytes+10)
	copy(big, `"`)
	for i := 1; i < len(big)-1; i++ {
		big[i] = 'a'
	}
	big[len(big)-1] = '"'
	cases := []struct {
		name  string
		event outbox.Event
		field string
	}{
		{"invalid JSON", outbox.Event{AggregateType: "payment", AggregateID: "x", EventType: "E", Payload: []byte(`{"a":`)}, "payload"},
		{"oversized", outbox.Event{AggregateType: "payment", AggregateID: "x", EventType: "E", Payload: big}, "payload"},
		{"missing aggregate id", outbox.Event{AggregateType: "payment", EventType: "E", Payload: []byte(`{}`)}, "aggregate_id"},
		{"missing event type", outbox.Event{AggregateType: "payment", AggregateID: "x", Payload: []byte(`{}`)}, "event_type"},
		{"header injection", outbox.Event{AggregateType: "payment", AggregateID: "x", EventType: "E", Payload: []byte(`{}`),
			Headers: map[string]string{"X-Trace": "a\r\nSet-Cookie: x"}}, "headers"},
		// Invalid UTF-8 anywhere: PostgreSQL and MariaDB used to refuse such
		// a payload with a raw database error, and SQLite to store it.
		{"payload not UTF-8", outbox.Event{AggregateType: "payment", AggregateID: "x", EventType: "E", Payload: []byte("{\"note\":\"caf\xe9\"}")}, "payload"},
		{"payload lone surrogate", outbox.Event{AggregateType: "payment", AggregateID: "x", EventType: "E", Payload: []byte(`{"a":"\ud800"}`)}, "payload"},
		{"aggregate id not UTF-8", outbox.Event{AggregateType: "payment", AggregateID: "tx-\xff", EventType: "E", Payload: []byte(`{}`)}, "aggregate_id"},
		{"aggregate type not UTF-8", outbox.Event{AggregateType: "pay\xc3", AggregateID: "x", EventType: "E", Payload: []byte(`{}`)}, "aggregate_type"},
		{"event type not UTF-8", outbox.Event{AggregateType: "payment", AggregateID: "x", EventType: "E\xa0", Payload: []byte(`{}`)}, "event_type"},
		{"header key not UTF-8", outbox.Event{AggregateType: "payment", AggregateID: "x", EventType: "E", Payload: []byte(`{}`),
			Headers: map[string]string{"x-\xff": "v"}}, "headers"},
		{"header value not UTF-8", outbox.Event{AggregateType: "payment", AggregateID: "x", EventType: "E", Payload: []byte(`{}`),
			Headers: map[string]string{"X-Trace": "\xff"}}, "headers"},
	}
	for _, tc := range cases {
		tx, err := h.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A valid event first: a bad one later in the call must stop the whole call.
		_, err = tx.Enqueue(ctx, PaymentEvent("good", 1), tc.event)
		var ie *outbox.InvalidEventError
		if !errors.Is(err, outbox.ErrInvalidEvent) || !errors.As(err, &ie) || ie.Field != tc.field || ie.Index != 1 {
			t.Errorf("%s: err = %v, want an InvalidEventError for event #1 field %s", tc.name, err, tc.field)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("%s: commit after a refused enqueue: %v", tc.name, err)
		}
	}
	st, err := h.Store.Stats(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	for status, n := range st.Counts {
		if n != 0 {
			t.Errorf("after refused enqueues: %d events in %s, want none written", n, status)
		}
	}
	if h.NewStore != nil {
		small := h.NewStore(t, outbox.Limits{MaxPayloadBytes: 10})
		tx, err := h.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		w, ok := small.(interface{ EnqueueLimits() outbox.Limits })
		if !ok || w.EnqueueLimits().MaxPayloadBytes != 10 {
			t.Errorf("a store configured with MaxPayloadBytes 10 reports limits %+v", w)
		}
	}
}

func testEnqueueFields(t *testing.T, h *Harness) {
	ctx := context.Background()
	fixed := outbox.NewEventID()
	e := outbox.Event{ID: fixed, AggregateType: "merchant", AggregateID: "m-7", EventType: "MerchantUpdated",
		Payload: []byte(`{"b": 2, "a": [1, 2.50, "x"]}`), Headers: map[string]string{"traceparent": "00-abc-def-01", "X-Correlation-Id": "c1"},
		TTL: time.Hour}
	got := Enqueue(t, h, e)
	if got[0] != fixed {
		t.Fatalf("Enqueue returned id %s, want the caller's %s", got[0], fixed)
	}
	r, err := h.Store.GetEvent(ctx, fixed)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Payload) != string(e.Payload) {
		t.Errorf("payload stored as %s, want byte-exact %s", r.Payload, e.Payload)
	}
	if r.Headers["traceparent"] != "00-abc-def-01" || r.Headers["X-Correlation-Id"] != "c1" || len(r.Headers) != 2 {
		t.Errorf("headers = %v", r.Headers)
	}
	if r.Status != outbox.StatusPending || r.RetryCount != 0 || r.AggregateType != "merchant" || r.AggregateID != "m-7" || r.EventType != "MerchantUpdated" {
		t.Errorf("record = %+v", r)
	}
	if d := r.ExpiresAt.Sub(r.CreatedAt); d < time.Hour-time.Second || d > time.Hour+time.Second {
		t.Errorf("expires_at - created_at = %s, want the 1h TTL", d)
	}
	// The same id twice is refused by the database's unique key.
	tx, err := h.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Enqueue(ctx, e); err == nil {
		t.Error("enqueueing an existing event id succeeded; want a unique-key error")
	}
	_ = tx.Rollback(ctx)
	// Delay: not claimable until due.
	Enqueue(t, h, outbox.Event{AggregateType: "payment", AggregateID: "later", EventType: "E", Payload: []byte(`{}`), Delay: time.Hour})
	c := claim(t, h.Store, 10, time.Minute, true)
	for _, ce := range c.Events {
		if ce.AggregateID == "later" {
			t.Error("an event delayed by an hour was claimed at once")
		}
	}
}

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

func testLeaseExpiryFencing(t *testing.T, h *Harness) {
	ctx := context.Background()
	Enqueue(t, h, PaymentEvent("lease", 1))
	old := claim(t, h.Store, 10, 150*time.Millisecond, true)
	if len(old.Events) != 1 {
		t.Fatalf("claimed %d", len(old.Events))
	}
	var reaped int64
	wait.Until(t, 10*time.Second, "the reaper to return the expired lease", func() (bool, error) {
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
	if err != nil || len(atts) != 1 || atts[0].Outcome != store.Expired {
		t.Fatalf("audit of an expiry = %+v, %v", atts, err)
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
	for id := range want {
		if !got[id] {
			t.Errorf("event %s committed late was never claimed", id)
		}
	}
	if len(got) != len(want) {
		t.Errorf("claimed %d events, want %d", len(got), len(want))
	}
}

func testListAndGet(t *testing.T, h *Harness) {
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		Enqueue(t, h, PaymentEvent("list", i))
	}
	Enqueue(t, h, PaymentEvent("other", 0))
	recs, err := h.Store.ListEvents(ctx, store.ListFilter{AggregateID: "list", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].ID <= recs[1].ID {
		t.Fatalf("list = %d records, want 3 newest first", len(recs))
	}
	more, err := h.Store.ListEvents(ctx, store.ListFilter{AggregateID: "list", BeforeID: recs[2].ID, Limit: 10})
	if err != nil || len(more) != 2 {
		t.Fatalf("next page = %d, %v; want 2", len(more), err)
	}
	pend, err := h.Store.ListEvents(ctx, store.ListFilter{Status: outbox.StatusPending, Limit: 100})
	if err != nil || len(pend) != 6 {
		t.Fatalf("PENDING list = %d, %v", len(pend), err)
	}
	if _, err := h.Store.GetEvent(ctx, outbox.NewEventID()); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("GetEvent of an unknown id: %v", err)
	}
}
