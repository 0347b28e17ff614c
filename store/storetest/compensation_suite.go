package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/compensation"
)

// WithCompensation returns e with a deadline already past (unless it has
// one) and an on_expired of type ApprovalExpired.
func WithCompensation(e outbox.Event, payload string) outbox.Event {
	if e.TTL == 0 && e.ExpiresAt.IsZero() {
		e.ExpiresAt = time.Now().Add(-time.Second)
	}
	e.OnExpired = &outbox.Compensation{EventType: "ApprovalExpired"}
	if payload != "" {
		e.OnExpired.Payload = json.RawMessage(payload)
	}
	e.Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	return e
}

// compensationsOf returns the events of the aggregate that compensate expired.
func compensationsOf(t testing.TB, h *Harness, aggregateID string, expired outbox.EventID) []store.Record {
	t.Helper()
	recs, err := h.Store.ListEvents(context.Background(), store.ListFilter{AggregateType: "payment", AggregateID: aggregateID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Record
	for _, r := range recs {
		if r.Headers[outbox.HeaderCompensates] == expired.String() {
			out = append(out, r)
		}
	}
	return out
}

// CheckCompensated checks that expired ended EXPIRED with exactly one
// compensating event on its aggregate, after its other events, linked
// both ways.
func CheckCompensated(t testing.TB, h *Harness, aggregateID string, expired outbox.EventID, wantPayload string) store.Record {
	t.Helper()
	ctx := context.Background()
	rec, err := h.Store.GetEvent(ctx, expired)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != outbox.StatusExpired {
		t.Fatalf("%s: %s, want EXPIRED", aggregateID, rec.Status)
	}
	comps := compensationsOf(t, h, aggregateID, expired)
	if len(comps) != 1 {
		t.Fatalf("%s: %d compensating events, want exactly 1: %+v", aggregateID, len(comps), comps)
	}
	c := comps[0]
	if c.EventID != compensation.ID(expired) || c.EventType != "ApprovalExpired" || c.AggregateType != rec.AggregateType {
		t.Errorf("%s: compensating event %s %s/%s, want id %s, type ApprovalExpired, same aggregate",
			aggregateID, c.EventID, c.AggregateType, c.EventType, compensation.ID(expired))
	}
	if c.ID <= rec.ID || !c.ExpiresAt.IsZero() {
		t.Errorf("%s: compensating event row %d expires %v; want after the expired row %d, without a deadline",
			aggregateID, c.ID, c.ExpiresAt, rec.ID)
	}
	if c.Headers["traceparent"] != rec.Headers["traceparent"] {
		t.Errorf("%s: compensating event traceparent %q, want the expired event's %q", aggregateID, c.Headers["traceparent"], rec.Headers["traceparent"])
	}
	if wantPayload != "" && !strings.Contains(string(c.Payload), wantPayload) {
		t.Errorf("%s: compensating payload %s, want it to contain %s", aggregateID, c.Payload, wantPayload)
	}
	atts, err := h.Store.Attempts(ctx, expired)
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, a := range atts {
		if a.Outcome == store.Compensated {
			links++
			if a.ClaimToken != c.EventID.String() || !strings.Contains(a.Error, c.EventID.String()) {
				t.Errorf("%s: link row %+v does not name the compensating event %s", aggregateID, a, c.EventID)
			}
		}
	}
	if links != 1 {
		t.Errorf("%s: audit trail %+v has %d COMPENSATED rows, want 1", aggregateID, atts, links)
	}
	return c
}

// testCompensationBySweeper: a waiting event that the sweeper expires gets
// its compensating event in the same transaction, after the aggregate's
// other events; sweeping again adds none.
func testCompensationBySweeper(t *testing.T, h *Harness) {
	ctx := context.Background()
	// BLOCKED behind a FAILED head, so that only the sweeper can expire it.
	Enqueue(t, h, PaymentEvent("sw", 1))
	f := claim(t, h.Store, 10, time.Minute, true)
	complete(t, h.Store, f, true, outcomes(f, store.Failed))
	e := WithCompensation(PaymentEvent("sw", 2), `{"reason":"qr code expired"}`)
	e.ExpiresAt, e.TTL = time.Time{}, 100*time.Millisecond
	ids := Enqueue(t, h, e, PaymentEvent("sw", 3))
	wait.Until(t, 10*time.Second, "the sweeper to expire the waiting event", func() (bool, error) {
		_, err := h.Store.Sweep(ctx, store.SweepRequest{FailedBlocks: true})
		if err != nil {
			return false, err
		}
		r, err := h.Store.GetEvent(ctx, ids[0])
		return r.Status == outbox.StatusExpired, err
	})
	c := CheckCompensated(t, h, "sw", ids[0], `{"reason":"qr code expired"}`)
	if later, _ := h.Store.GetEvent(ctx, ids[1]); c.ID <= later.ID {
		t.Errorf("compensating row %d is before the aggregate's later event %d", c.ID, later.ID)
	}
	if _, err := h.Store.Sweep(ctx, store.SweepRequest{FailedBlocks: true}); err != nil {
		t.Fatal(err)
	}
	CheckCompensated(t, h, "sw", ids[0], "")
}

// testCompensationByComplete: an event the relay completes as EXPIRED (at
// claim, or on a late send) gets its compensating event; without a
// payload, it is made of the expired event's fields. A replayed completion,
// and a requeue that expires again, add none.
func testCompensationByComplete(t *testing.T, h *Harness) {
	ctx := context.Background()
	ids := Enqueue(t, h, WithCompensation(PaymentEvent("cl", 1), ""))
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 1 || !c.Events[0].Expired {
		t.Fatalf("claim = %+v, want the expired event flagged", c.Events)
	}
	outs := outcomes(c, store.Expired)
	complete(t, h.Store, c, true, outs)
	complete(t, h.Store, c, true, outs) // a replay after an ambiguous commit
	comp := CheckCompensated(t, h, "cl", ids[0], `"expired_event_id":"`+ids[0].String()+`"`)
	for _, want := range []string{`"expired_event_type":"ApprovalRequested"`, `"aggregate_id":"cl"`, `"payload":{"aggregate":"cl","n":1}`} {
		if !strings.Contains(string(comp.Payload), want) {
			t.Errorf("template payload %s lacks %s", comp.Payload, want)
		}
	}

	// A late send: not expired at claim, the relay found the deadline
	// passed during delivery.
	late := WithCompensation(PaymentEvent("late", 1), `{"late":true}`)
	late.ExpiresAt, late.TTL = time.Time{}, time.Hour
	lateIDs := Enqueue(t, h, late, PaymentEvent("late", 2))
	c = claim(t, h.Store, 10, time.Minute, true)
	var lateOuts []store.Outcome
	for _, o := range outcomes(c, store.Released) {
		if o.EventID == lateIDs[0] {
			o.Kind, o.Error = store.Expired, "expired during delivery: test"
		}
		lateOuts = append(lateOuts, o)
	}
	complete(t, h.Store, c, true, lateOuts)
	CheckCompensated(t, h, "late", lateIDs[0], `{"late":true}`)

	// An operator requeues the expired event with a new deadline, and it
	// expires again: still one compensating event.
	if err := h.Store.Requeue(ctx, store.OperatorAction{EventID: ids[0], Actor: "bob", NewTTL: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, "the requeued event to expire again", func() (bool, error) {
		_, err := h.Store.Sweep(ctx, store.SweepRequest{FailedBlocks: true})
		if err != nil {
			return false, err
		}
		c := claim(t, h.Store, 10, time.Minute, true)
		var outs []store.Outcome
		for _, o := range outcomes(c, store.Released) {
			if o.EventID == ids[0] {
				o.Kind = store.Expired
			}
			outs = append(outs, o)
		}
		if len(outs) > 0 {
			complete(t, h.Store, c, true, outs)
		}
		r, err := h.Store.GetEvent(ctx, ids[0])
		return r.Status == outbox.StatusExpired, err
	})
	CheckCompensated(t, h, "cl", ids[0], "")
}

// testOnExpiredBadInput: a bad on_expired is refused at Enqueue, naming
// the field, and nothing is written.
func testOnExpiredBadInput(t *testing.T, h *Harness) {
	ctx := context.Background()
	cases := []struct {
		name string
		mod  func(e *outbox.Event)
		want string
	}{
		{"no deadline", func(e *outbox.Event) { e.ExpiresAt = time.Time{} }, "needs a deadline"},
		{"no event type", func(e *outbox.Event) { e.OnExpired.EventType = "" }, "event_type is required"},
		{"payload not JSON", func(e *outbox.Event) { e.OnExpired.Payload = json.RawMessage(`{bad`) }, "payload is not valid JSON"},
		{"event type too long", func(e *outbox.Event) { e.OnExpired.EventType = strings.Repeat("x", 201) }, "limit is 200"},
	}
	for _, tc := range cases {
		e := WithCompensation(PaymentEvent("bad", 1), "")
		tc.mod(&e)
		tx, err := h.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Enqueue(ctx, e)
		_ = tx.Rollback(ctx)
		var ie *outbox.InvalidEventError
		if !errors.As(err, &ie) || ie.Field != "on_expired" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Enqueue = %v, want an invalid-event error on on_expired saying %q", tc.name, err, tc.want)
		}
	}
	if n := CountStatus(t, h.Store, outbox.StatusPending); n != 0 {
		t.Fatalf("refused events wrote %d rows", n)
	}
}
