package sinktest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// testDestination: the sink names every message's route (sink.Destinations)
// as the message arrives there, without credentials or query, and says
// it reached its destination (sink.Health) once it delivered.
func testDestination(t *testing.T, h *Harness) {
	d, ok := h.Sink.(sink.Destinations)
	if !ok {
		t.Fatalf("%T does not implement sink.Destinations", h.Sink)
	}
	m := Message("dest", 0)
	dest := d.Destination(&m)
	if dest == "" || dest == sink.DefaultDestination {
		t.Fatalf("Destination = %q, want the route", dest)
	}
	if strings.ContainsAny(dest, "?@") || strings.Contains(dest, "xxxxx") {
		t.Fatalf("Destination = %q: a route carries no credentials or query", dest)
	}
	if again := d.Destination(&m); again != dest {
		t.Fatalf("Destination changed from %q to %q for the same message", dest, again)
	}
	publishOK(t, h, []outbox.Message{m})
	rs := byID(read(t, h, 1))[m.EventID.String()]
	if len(rs) == 0 {
		t.Fatal("the message did not arrive")
	}
	route := rs[0].Destination
	if h.RouteOf != nil {
		route = h.RouteOf(rs[0])
	}
	if route != dest {
		t.Fatalf("the message arrived at %q, but Destination named %q", route, dest)
	}
	hl, ok := h.Sink.(sink.Health)
	if !ok {
		t.Fatalf("%T does not implement sink.Health", h.Sink)
	}
	if ok, err, _ := hl.Reachable(); !ok {
		t.Fatalf("after a delivery, Reachable() = false, %v", err)
	}
}

// testInvalidDestination: an aggregate type whose route the sink must
// refuse fails that event permanently with a DestinationError naming the
// field; the later event of its aggregate is not sent; another aggregate
// is delivered; nothing of the refused aggregate arrives.
func testInvalidDestination(t *testing.T, h *Harness) {
	if len(h.InvalidAggregateTypes) == 0 {
		t.Skip("every aggregate type routes to a valid destination for this sink")
	}
	var refused []outbox.Message
	var good []outbox.Message
	for _, typ := range h.InvalidAggregateTypes {
		bad, after, ok := Message("inv", 0), Message("inv", 1), Message("valid", 0)
		bad.AggregateType, after.AggregateType = typ, typ
		ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
		res := h.Sink.Publish(ctx, []outbox.Message{bad, after, ok})
		cancel()
		if len(res) != 3 {
			t.Fatalf("Publish returned %d results for 3 messages", len(res))
		}
		var de *sink.DestinationError
		if !outbox.IsPermanent(res[0]) || !errors.As(res[0], &de) || !strings.Contains(res[0].Error(), "aggregate_type") {
			t.Errorf("aggregate type %.40q: %v, want a permanent sink.DestinationError naming aggregate_type", typ, res[0])
		}
		if !errors.Is(res[1], outbox.ErrNotAttempted) {
			t.Errorf("aggregate type %.40q, the later event: %v, want not attempted", typ, res[1])
		}
		if res[2] != nil {
			t.Errorf("a valid aggregate in the same call failed: %v", res[2])
		}
		refused = append(refused, bad, after)
		good = append(good, ok)
	}
	if missing := waitForIDs(t, h, good); len(missing) > 0 {
		t.Fatalf("valid messages did not arrive: %v", missing)
	}
	got := byID(read(t, h, len(good)))
	for _, m := range refused {
		if len(got[m.EventID.String()]) > 0 {
			t.Fatalf("event %s of the refused aggregate type %.40q arrived", m.EventID, m.AggregateType)
		}
	}
}

// testUnreachable: a sink whose destination is down at start is made
// without error, reports every message as a retryable failure (not
// delivered, not permanent), says it cannot reach the destination, and
// closes.
func testUnreachable(t *testing.T, h *Harness) {
	if h.Unreachable == nil {
		t.Skip("the sink has no destination to be down")
	}
	s := h.Unreachable(t)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close of a sink that never connected: %v", err)
		}
	}()
	msgs := []outbox.Message{Message("down", 0), Message("down", 1), Message("down2", 0)}
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	start := time.Now()
	res := s.Publish(ctx, msgs)
	if len(res) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(res), len(msgs))
	}
	for i, err := range res {
		if err == nil || outbox.IsPermanent(err) {
			t.Fatalf("result %d with the destination down: %v, want a retryable error", i, err)
		}
	}
	t.Logf("Publish with the destination down took %s: %v", time.Since(start).Round(time.Millisecond), res[0])
	hl, ok := s.(sink.Health)
	if !ok {
		t.Fatalf("%T does not implement sink.Health", s)
	}
	Eventually(t, h.Timeout, "Reachable to report the destination down with the reason", func() bool {
		ok, err, _ := hl.Reachable()
		return !ok && err != nil
	})
}

// testTraceContext: the event's W3C trace context (traceparent and
// tracestate) arrives under those names (an HTTP header, a Kafka record
// header, a NATS or AMQP header, a Redis stream field), unchanged.
func testTraceContext(t *testing.T, h *Harness) {
	m := Message("trace", 0)
	m.Headers = map[string]string{
		sink.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		sink.HeaderTracestate:  "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
	}
	publishOK(t, h, []outbox.Message{m})
	rs := byID(read(t, h, 1))[m.EventID.String()]
	if len(rs) == 0 {
		t.Fatal("the message did not arrive")
	}
	for k, v := range m.Headers {
		if got := lookup(rs[0].Headers, k); got != v {
			t.Errorf("%s arrived as %q, want %q (headers %v)", k, got, v, rs[0].Headers)
		}
	}
}
