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
		{"AbandonedBatchClaimedAgain", testAbandonedBatchClaimedAgain},
		{"ClaimWhoseAnswerWasLost", testClaimAnswerLost},
		{"BusyLanesStayWithTheirRelay", testBusyLanesStayWithTheirRelay},
		{"LateCommitInOneLane", testLateCommitInOneLane},
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

// shortLeaseStep is how long claimShortLease tries a lease before it
// doubles it.
var shortLeaseStep = 20 * time.Second

// claimShortLease claims under a lease so short that a claim on a loaded
// database may not get through: a claim must commit with half the lease
// still left on its lanes, and an empty claim is all it gets otherwise.
// The tests need a lease that ends soon, not a given length, so when no
// claim has taken the events for 20 s, req.Lease doubles (up to 8 times
// the first; logged): on a busy machine a claim on MariaDB under a lease
// of a few seconds may take nothing for minutes. The caller's req holds
// the lease the claim was made under.
func claimShortLease(t testing.TB, s store.Store, req *store.ClaimRequest, want int) *store.Claim {
	t.Helper()
	var (
		c      *store.Claim
		empty  int
		first  = req.Lease
		longer = time.Now().Add(shortLeaseStep)
	)
	// The deadline bounds a hang.
	wait.Until(t, 2*time.Minute, fmt.Sprintf("a claim under a %s lease (or up to 8 times longer) to take %d events", req.Lease, want), func() (bool, error) {
		if time.Now().After(longer) && req.Lease < 8*first {
			t.Logf("no claim under a %s lease took the events in %s (%d came back empty: a loaded database); claiming under %s", req.Lease, shortLeaseStep, empty, 2*req.Lease)
			req.Lease *= 2
			empty, longer = 0, time.Now().Add(shortLeaseStep)
		}
		var err error
		c, err = s.Claim(context.Background(), *req)
		if err == nil && len(c.Events) == 0 {
			empty++
		}
		return err == nil && len(c.Events) == want, err
	})
	return c
}

// claimAgainAfterSweeps sweeps and claims until a claim takes events,
// and checks that it took exactly want, in order. It returns the claim and
// when the call that made it began (the claim's lease runs from a moment
// after that).
func claimAgainAfterSweeps(t testing.TB, h *Harness, req store.ClaimRequest, what string, want []outbox.EventID) (*store.Claim, time.Time) {
	t.Helper()
	ctx := context.Background()
	var (
		again *store.Claim
		began time.Time
	)
	// A bound for a hang, with room for MariaDB on a busy machine.
	wait.Until(t, 2*time.Minute, what, func() (bool, error) {
		if _, err := h.Store.Sweep(ctx, store.SweepRequest{RelayID: "sweeper", FailedBlocks: true}); err != nil {
			return false, err
		}
		began = time.Now()
		c, err := h.Store.Claim(ctx, req)
		if err != nil || len(c.Events) == 0 {
			return false, err
		}
		again = c
		return true, nil
	})
	got := make([]outbox.EventID, len(again.Events))
	for i, e := range again.Events {
		got[i] = e.EventID
	}
	if !slices.Equal(got, want) {
		t.Fatalf("claimed again %v, want the events %v", ids(again), want)
	}
	return again, began
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
