package sink

import (
	"errors"
	"testing"

	"github.com/txoutbox/outbox"
)

func TestRouter(t *testing.T) {
	r, err := NewRouter("", map[string]string{"merchant": "merchant.audit"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ aggType, want string }{{"payment", "payment.events"}, {"merchant", "merchant.audit"}} {
		m := outbox.Message{AggregateType: tc.aggType, AggregateID: "x", EventType: "E"}
		if got := r.Route(&m); got != tc.want {
			t.Errorf("Route(%s) = %q, want %q", tc.aggType, got, tc.want)
		}
	}
	r, _ = NewRouter("{aggregate_type}.{event_type}", nil)
	m := outbox.Message{AggregateType: "payment", EventType: "ApprovalRequested"}
	if got := r.Route(&m); got != "payment.ApprovalRequested" {
		t.Errorf("Route = %q", got)
	}
	if _, err := NewRouter("{aggregate}.events", nil); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("unknown placeholder: %v", err)
	}
	if _, err := ParseRouteOverrides([]string{"merchant"}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("override without '=': %v", err)
	}
	if o, err := ParseRouteOverrides([]string{"merchant=merchant.audit"}); err != nil || o["merchant"] != "merchant.audit" {
		t.Errorf("ParseRouteOverrides = %v, %v", o, err)
	}
}

func TestRouterLiteralsAndAllFields(t *testing.T) {
	r, err := NewRouter("svc.{aggregate_type}.{aggregate_id}.{event_type}.v1", map[string]string{"fixed": "audit.all"})
	if err != nil {
		t.Fatal(err)
	}
	m := outbox.Message{AggregateType: "payment", AggregateID: "tx-9", EventType: "Approved"}
	if got := r.Route(&m); got != "svc.payment.tx-9.Approved.v1" {
		t.Fatalf("Route = %q", got)
	}
	m.AggregateType = "fixed"
	if got := r.Route(&m); got != "audit.all" {
		t.Fatalf("override without placeholders = %q", got)
	}
}
