package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// LanesUpgrade adapts a backend to RunLanesUpgrade.
type LanesUpgrade struct {
	// Harness is on a table at the version before the lanes migration:
	// Store, Begin, SQL, Table and Bind are used.
	Harness *Harness
	// Q is the identifier quote around the table names.
	Q string
	// Now is the SQL expression of the database clock in the stored form;
	// Soon is that clock one second later.
	Now, Soon string
	// Before is the version before the lanes migration.
	Before int64
	// MigrateUp applies the remaining migrations; MigrateDownTo reverts
	// them down to a version.
	MigrateUp     func(ctx context.Context) error
	MigrateDownTo func(ctx context.Context, version int64) error
}

// RunLanesUpgrade fills a table of the version before the lanes migration
// with events of many aggregates in every state, as relays of that version
// left them (one PROCESSING under a lease that ends in a second), applies
// the migration, and checks:
//
//   - every row keeps its status, and the unfinished rows of an aggregate
//     share one lane in [0, 64);
//   - relays of the new version deliver every PENDING event exactly once,
//     in id order per aggregate, the one claimed before the upgrade once
//     its lease ended and the sweeper returned it, and the aggregate
//     behind a FAILED event stays BLOCKED;
//   - the downgrade keeps every row and status, and the upgrade again
//     gives the same statuses.
func RunLanesUpgrade(t *testing.T, u LanesUpgrade) {
	t.Helper()
	ctx := context.Background()
	h := u.Harness
	s := h.Store
	bind := func(q string) string {
		if h.Bind != nil {
			return h.Bind(q)
		}
		return q
	}
	outboxT := u.Q + h.Table + u.Q
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := h.SQL.ExecContext(ctx, bind(q), args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// 12 aggregates of 8 events, interleaved as producers write them.
	const aggregates, perAggregate = 12, 8
	var events []outbox.Event
	for n := 1; n <= perAggregate; n++ {
		for a := 0; a < aggregates; a++ {
			events = append(events, PaymentEvent(fmt.Sprintf("lane-up-%d", a), n))
		}
	}
	ids := Enqueue(t, h, events...)
	byAggregate := map[string][]outbox.EventID{}
	for i, id := range ids {
		a := events[i].AggregateID
		byAggregate[a] = append(byAggregate[a], id)
	}
	agg := func(a int) []outbox.EventID { return byAggregate[fmt.Sprintf("lane-up-%d", a)] }

	// The states the previous version left: aggregate 0 delivered its
	// first two events; aggregate 1's first event is claimed under a lease
	// that ends in a second; aggregate 2's first event FAILED and the rest
	// are BLOCKED behind it; aggregate 3's first event EXPIRED.
	const legacyToken = "00000000-0000-4000-8000-0000000000bb"
	for _, id := range agg(0)[:2] {
		exec(`UPDATE `+outboxT+` SET status = 'PROCESSED', processed_at = `+u.Now+` WHERE event_id = ?`, id.String())
	}
	exec(`UPDATE `+outboxT+` SET status = 'PROCESSING', lock_token = ?, locked_until = `+u.Soon+`, retry_count = 0 WHERE event_id = ?`,
		legacyToken, agg(1)[0].String())
	exec(`UPDATE `+outboxT+` SET status = 'FAILED', retry_count = 3, processed_at = `+u.Now+`, last_error = 'gone' WHERE event_id = ?`,
		agg(2)[0].String())
	for _, id := range agg(2)[1:] {
		exec(`UPDATE `+outboxT+` SET status = 'BLOCKED' WHERE event_id = ?`, id.String())
	}
	exec(`UPDATE `+outboxT+` SET status = 'EXPIRED', processed_at = `+u.Now+` WHERE event_id = ?`, agg(3)[0].String())

	statuses := func(when string) map[outbox.EventID]outbox.Status {
		t.Helper()
		out := map[outbox.EventID]outbox.Status{}
		for _, id := range ids {
			var st string
			if err := h.SQL.QueryRowContext(ctx, bind(`SELECT status FROM `+outboxT+` WHERE event_id = ?`), id.String()).Scan(&st); err != nil {
				t.Fatalf("%s: status of %s: %v", when, id, err)
			}
			out[id] = outbox.Status(st)
		}
		return out
	}
	before := statuses("before the upgrade")

	if err := u.MigrateUp(ctx); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	for _, id := range ids {
		r, err := s.GetEvent(ctx, id)
		if err != nil || r.Status != before[id] {
			t.Errorf("event %s after the upgrade: %v, %v; want %s", id, r.Status, err, before[id])
		}
	}
	for a := 0; a < aggregates; a++ {
		var lanes, lo, hi int
		if err := h.SQL.QueryRowContext(ctx, bind(`SELECT count(DISTINCT lane), min(lane), max(lane) FROM `+outboxT+`
			WHERE aggregate_id = ? AND status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED')`),
			fmt.Sprintf("lane-up-%d", a)).Scan(&lanes, &lo, &hi); err != nil {
			t.Fatalf("lanes of aggregate %d: %v", a, err)
		}
		if lanes != 1 || lo < 0 || hi >= 64 {
			t.Errorf("aggregate %d's unfinished rows are in %d lanes (%d..%d), want one lane in [0, 64)", a, lanes, lo, hi)
		}
	}

	// Two relays of the new version deliver the rest.
	delivered := map[outbox.EventID]int{}
	order := map[string][]outbox.EventID{}
	aggregateOf := map[outbox.EventID]string{}
	for i, id := range ids {
		aggregateOf[id] = events[i].AggregateID
	}
	want := 0
	for _, id := range ids {
		if before[id] == outbox.StatusPending || before[id] == outbox.StatusProcessing {
			want++
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for relay := 0; len(delivered) < want; relay = (relay + 1) % 2 {
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d of %d events within 30s", len(delivered), want)
		}
		relayID := fmt.Sprint("relay-lanes-up-", relay)
		if _, err := s.Sweep(ctx, store.SweepRequest{RelayID: relayID, FailedBlocks: true}); err != nil {
			t.Fatalf("sweep: %v", err)
		}
		c, err := s.Claim(ctx, store.ClaimRequest{RelayID: relayID, Limit: 10, Lease: time.Minute, FailedBlocks: true})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if len(c.Events) == 0 {
			time.Sleep(20 * time.Millisecond) // the old lease has not ended yet
			continue
		}
		outs := make([]store.Outcome, len(c.Events))
		for i, e := range c.Events {
			outs[i] = store.Outcome{ID: e.ID, EventID: e.EventID, Kind: store.Delivered, Attempted: true, Attempt: e.Attempt}
		}
		res, err := s.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: relayID, FailedBlocks: true, Outcomes: outs})
		if err != nil {
			t.Fatalf("complete: %v", err)
		}
		applied := map[int64]bool{}
		for _, id := range res.Applied {
			applied[id] = true
		}
		for _, e := range c.Events {
			if applied[e.ID] {
				delivered[e.EventID]++
				order[aggregateOf[e.EventID]] = append(order[aggregateOf[e.EventID]], e.EventID)
			}
		}
	}
	for id, n := range delivered {
		if n != 1 || (before[id] != outbox.StatusPending && before[id] != outbox.StatusProcessing) {
			t.Errorf("event %s (%s before the upgrade) delivered %d times", id, before[id], n)
		}
	}
	for a, got := range order {
		var exp []outbox.EventID
		for _, id := range byAggregate[a] {
			if before[id] == outbox.StatusPending || before[id] == outbox.StatusProcessing {
				exp = append(exp, id)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Errorf("aggregate %s delivered %v, want %v in id order", a, got, exp)
		}
	}
	checkLegacyReapAudited(t, s, agg(1)[0], legacyToken, "")
	after := statuses("after the deliveries")
	for _, id := range agg(2)[1:] {
		if after[id] != outbox.StatusBlocked {
			t.Errorf("event %s behind the FAILED one is %s, want BLOCKED", id, after[id])
		}
	}

	// Down and up again: every row and status is kept.
	if err := u.MigrateDownTo(ctx, u.Before); err != nil {
		t.Fatalf("migrate down to %d: %v", u.Before, err)
	}
	if got := statuses("after the downgrade"); fmt.Sprint(got) != fmt.Sprint(after) {
		t.Errorf("the downgrade changed statuses:\n got %v\nwant %v", got, after)
	}
	if err := u.MigrateUp(ctx); err != nil {
		t.Fatalf("migrate up again: %v", err)
	}
	for _, id := range ids {
		r, err := s.GetEvent(ctx, id)
		if err != nil || r.Status != after[id] {
			t.Errorf("event %s after down and up again: %v, %v; want %s", id, r.Status, err, after[id])
		}
	}
}

// checkLegacyReapAudited checks that the row of event id, claimed by a
// relay of the previous schema under token, was reaped once its lease
// ended and audited once: LEASE_EXPIRED under that token, as the attempt
// that ended without a result (its retry_count was 0: attempt 1), and by
// relayID when it is set.
func checkLegacyReapAudited(t *testing.T, s store.Store, id outbox.EventID, token, relayID string) {
	t.Helper()
	atts, err := s.Attempts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var reaped []store.Attempt
	for _, a := range atts {
		if a.Outcome == store.LeaseExpired {
			reaped = append(reaped, a)
		}
	}
	if len(reaped) != 1 || reaped[0].ClaimToken != token || reaped[0].Attempt != 1 || (relayID != "" && reaped[0].RelayID != relayID) {
		t.Errorf("the reap of the row claimed before the upgrade was audited %+v; want one LEASE_EXPIRED row under the old claim's token %s, attempt 1 (relay %q)",
			reaped, token, relayID)
	}
}
