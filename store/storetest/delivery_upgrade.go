package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// DeliveryUpgrade adapts a backend whose migration records a successful
// delivery on the event row (the delivered_* columns) to
// RunDeliveryOnRowUpgrade.
type DeliveryUpgrade struct {
	// Harness is on a table at the version before that migration: Store,
	// Begin, SQL and Table are used; the suite's statements use ?
	// placeholders (Bind rewrites them).
	Harness *Harness
	// Q is the identifier quote around the table names.
	Q string
	// Now is the SQL expression of the database clock in the stored form;
	// Soon is that clock one second later.
	Now, Soon string
	// Before is the version before the migration.
	Before int64
	// MigrateUp applies the remaining migrations; MigrateDownTo reverts
	// them down to a version.
	MigrateUp     func(ctx context.Context) error
	MigrateDownTo func(ctx context.Context, version int64) error
}

// RunDeliveryOnRowUpgrade upgrades a populated table to the migration that
// records deliveries on the event row, and the later ones (lanes), and
// back: every row keeps its state, a delivery from before the upgrade (an
// attempt row) shows once in the audit trail, a row claimed before the
// upgrade stays PROCESSING (its relay's late outcome is fenced: relays
// stop for an upgrade) until the sweeper returns it when its lease ends,
// then is delivered once; a new delivery writes no attempt row and shows
// once (a replay of its outcome too), a wrong token changes nothing, an
// operator requeue keeps the first delivery beside the second, and the
// downgrade moves the deliveries recorded on rows back into the attempts
// table.
func RunDeliveryOnRowUpgrade(t *testing.T, u DeliveryUpgrade) {
	t.Helper()
	ctx := context.Background()
	const (
		wrongToken  = "00000000-0000-4000-8000-0000000000ff"
		legacyToken = "00000000-0000-4000-8000-0000000000aa"
	)
	h := u.Harness
	s := h.Store
	bind := func(q string) string {
		if h.Bind != nil {
			return h.Bind(q)
		}
		return q
	}
	outboxT := u.Q + h.Table + u.Q
	attemptsT := u.Q + h.Table + "_attempts" + u.Q
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := h.SQL.ExecContext(ctx, bind(q), args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := h.SQL.QueryRowContext(ctx, bind(q), args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	attemptRows := func(id outbox.EventID) int {
		t.Helper()
		return count(`SELECT count(*) FROM `+attemptsT+` WHERE event_id = ? AND outcome = 'DELIVERED' AND claim_token NOT IN (?, ?)`,
			id.String(), wrongToken, legacyToken)
	}
	claimOne := func(lease time.Duration) *store.Claim {
		t.Helper()
		c, err := s.Claim(ctx, store.ClaimRequest{RelayID: "relay-up", Limit: 1, Lease: lease, FailedBlocks: true})
		if err != nil || len(c.Events) != 1 {
			t.Fatalf("claim: %+v, %v; want one event", c, err)
		}
		return c
	}
	complete := func(c *store.Claim, token string, trace string) store.CompleteResult {
		t.Helper()
		e := c.Events[0]
		res, err := s.Complete(ctx, store.CompleteRequest{Token: token, RelayID: "relay-up", FailedBlocks: true,
			Outcomes: []store.Outcome{{ID: e.ID, EventID: e.EventID, Kind: store.Delivered, Attempted: true,
				Attempt: e.Attempt, StartedAt: c.DBTime, FinishedAt: c.DBTime.Add(time.Millisecond), TraceID: trace}}})
		if err != nil {
			t.Fatalf("complete: %v", err)
		}
		return res
	}
	deliveries := func(id outbox.EventID) []store.Attempt {
		t.Helper()
		atts, err := s.Attempts(ctx, id)
		if err != nil {
			t.Fatalf("attempts: %v", err)
		}
		var out []store.Attempt
		for _, a := range atts {
			if a.Outcome == store.Delivered && a.Error == "" { // not a fenced outcome
				out = append(out, a)
			}
		}
		return out
	}

	// Before the upgrade: an event claimed by a relay of the old version
	// (PROCESSING under its token, with a lease that ends in a second),
	// then one event per other state, set with plain SQL as the old
	// version left them (an old delivery is an attempt row).
	inFlight := Enqueue(t, h, PaymentEvent("dup-flight", 1))[0]
	exec(`UPDATE `+outboxT+` SET status = 'PROCESSING', lock_token = ?, locked_until = `+u.Soon+` WHERE event_id = ?`,
		legacyToken, inFlight.String())
	old := Enqueue(t, h, PaymentEvent("dup-old", 1))[0]
	pending := Enqueue(t, h, PaymentEvent("dup-pending", 1))[0]
	failed := Enqueue(t, h, PaymentEvent("dup-failed", 1))[0]
	blocked := Enqueue(t, h, PaymentEvent("dup-failed", 2))[0]
	exec(`UPDATE `+outboxT+` SET status = 'PROCESSED', processed_at = `+u.Now+` WHERE event_id = ?`, old.String())
	exec(`INSERT INTO `+attemptsT+` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at)
		SELECT event_id, '00000000-0000-4000-8000-000000000001', 'DELIVERED', id, 1, 'relay-old', `+u.Now+`, `+u.Now+`
		FROM `+outboxT+` WHERE event_id = ?`, old.String())
	exec(`UPDATE `+outboxT+` SET status = 'FAILED', retry_count = 3, processed_at = `+u.Now+`, last_error = 'gone' WHERE event_id = ?`, failed.String())
	exec(`UPDATE `+outboxT+` SET status = 'BLOCKED' WHERE event_id = ?`, blocked.String())
	want := map[outbox.EventID]outbox.Status{inFlight: outbox.StatusProcessing, old: outbox.StatusProcessed,
		pending: outbox.StatusPending, failed: outbox.StatusFailed, blocked: outbox.StatusBlocked}

	if err := u.MigrateUp(ctx); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	for id, st := range want {
		r, err := s.GetEvent(ctx, id)
		if err != nil || r.Status != st {
			t.Errorf("event %s after the upgrade: %v, %v; want %s", id, r.Status, err, st)
		}
	}
	if d := deliveries(old); len(d) != 1 || d[0].RelayID != "relay-old" {
		t.Errorf("the delivery from before the upgrade: %+v; want it once", d)
	}

	// The row claimed before the upgrade is not claimed again while its
	// lease lasts; the old relay's outcome, arriving late, is fenced.
	legacy := &store.Claim{Events: []store.Claimed{{Message: outbox.Message{ID: idOf(t, h, outboxT, inFlight, bind), EventID: inFlight, Attempt: 1}}},
		DBTime: time.Now()}
	if res := complete(legacy, legacyToken, ""); len(res.Applied) != 0 {
		t.Errorf("an outcome under a claim of the previous version applied %v", res.Applied)
	}
	if r, err := s.GetEvent(ctx, inFlight); err != nil || r.Status != outbox.StatusProcessing {
		t.Errorf("after the old claim's outcome: %v, %v; want PROCESSING until its lease ends", r.Status, err)
	}
	// Once the lease ended the sweeper returns it, and it is delivered.
	waitFor(t, 30*time.Second, "the sweeper returns the row claimed before the upgrade", func() (bool, error) {
		res, err := s.Sweep(ctx, store.SweepRequest{RelayID: "relay-up", FailedBlocks: true})
		return res.Reaped == 1, err
	})
	checkLegacyReapAudited(t, s, inFlight, legacyToken, "relay-up")
	flight := claimOne(time.Hour)
	if flight.Events[0].EventID != inFlight {
		t.Fatalf("claimed %s first, want %s, returned by the sweeper", flight.Events[0].EventID, inFlight)
	}

	// A wrong token changes nothing; the claim completes, on the row; its
	// replay writes nothing.
	if res := complete(flight, wrongToken, ""); len(res.Applied) != 0 {
		t.Errorf("a wrong token applied %v", res.Applied)
	}
	if r, err := s.GetEvent(ctx, inFlight); err != nil || r.Status != outbox.StatusProcessing {
		t.Errorf("after a wrong token: %v, %v; want PROCESSING", r.Status, err)
	}
	if n := count(`SELECT count(*) FROM `+outboxT+` WHERE event_id = ? AND delivered_relay_id IS NOT NULL`, inFlight.String()); n != 0 {
		t.Errorf("a wrong token recorded a delivery on the row")
	}
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	if res := complete(flight, flight.Token, trace); len(res.Applied) != 1 {
		t.Fatalf("completing the claim applied %v", res.Applied)
	}
	complete(flight, flight.Token, trace) // the replay after an ambiguous commit
	d := deliveries(inFlight)
	if len(d) != 1 || d[0].ClaimToken != flight.Token || d[0].RelayID != "relay-up" || d[0].TraceID != trace ||
		d[0].Attempt != flight.Events[0].Attempt || !d[0].FinishedAt.Equal(flight.DBTime.Add(time.Millisecond)) {
		t.Errorf("the delivery after the upgrade: %+v; want it once under token %s", d, flight.Token)
	}
	if n := attemptRows(inFlight); n != 0 {
		t.Errorf("a delivery wrote %d attempt rows, want 0", n)
	}

	// A new event delivered, then (as if it had failed) requeued by an
	// operator and delivered again: both deliveries show, in order.
	c := claimOne(time.Minute)
	if c.Events[0].EventID != pending {
		t.Fatalf("claimed %s, want the pending event %s", c.Events[0].EventID, pending)
	}
	complete(c, c.Token, "")
	exec(`UPDATE `+outboxT+` SET status = 'FAILED' WHERE event_id = ?`, pending.String())
	if err := s.Requeue(ctx, store.OperatorAction{EventID: pending, Actor: "test", Reason: "again"}); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	c2 := claimOne(time.Minute)
	complete(c2, c2.Token, "")
	if d := deliveries(pending); len(d) != 2 || d[0].ClaimToken != c.Token || d[1].ClaimToken != c2.Token {
		t.Errorf("delivered, requeued, delivered: %+v; want both deliveries in order", d)
	}

	// The overview's throughput counts the deliveries of both kinds: the
	// old one and the first of the requeued event (attempt rows), the two
	// on rows, and the two fenced outcomes (attempt rows, DELIVERED).
	buckets, err := s.AdminQueries().Throughput(ctx, time.Hour)
	if err != nil {
		t.Fatalf("throughput: %v", err)
	}
	n := 0
	for _, b := range buckets {
		if b.Outcome == store.Delivered {
			n += int(b.Count)
		}
	}
	if n != 6 {
		t.Errorf("throughput counts %d deliveries in the last hour, want 6: %+v", n, buckets)
	}

	// Down: the deliveries on the rows go back to the attempts table.
	if err := u.MigrateDownTo(ctx, u.Before); err != nil {
		t.Fatalf("migrate down to %d: %v", u.Before, err)
	}
	for id, n := range map[outbox.EventID]int{old: 1, inFlight: 1, pending: 2} {
		if got := attemptRows(id); got != n {
			t.Errorf("event %s after the downgrade: %d DELIVERED attempt rows, want %d", id, got, n)
		}
	}
	if err := u.MigrateUp(ctx); err != nil {
		t.Fatalf("migrate up again: %v", err)
	}
	if d := deliveries(inFlight); len(d) != 1 || d[0].ClaimToken != flight.Token {
		t.Errorf("down and up again: %+v; want the delivery once", d)
	}
}

// idOf reads the outbox id of event id.
func idOf(t *testing.T, h *Harness, outboxT string, id outbox.EventID, bind func(string) string) int64 {
	t.Helper()
	var n int64
	if err := h.SQL.QueryRowContext(context.Background(), bind(`SELECT id FROM `+outboxT+` WHERE event_id = ?`), id.String()).Scan(&n); err != nil {
		t.Fatalf("id of %s: %v", id, err)
	}
	return n
}

// waitFor polls cond until it holds, failing the test at the deadline.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
