package fanout

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/destconfig"
)

// copier records the ids copied, and fails when err is set.
type copier struct {
	calls [][]int64
	err   error
}

func (c *copier) CopyEvents(_ context.Context, from string, ids []int64) (int64, error) {
	if from != "outbox_events" {
		return 0, errors.New("copied from " + from)
	}
	c.calls = append(c.calls, slices.Clone(ids))
	if c.err != nil {
		return 0, c.err
	}
	return int64(len(ids)), nil
}

const file = `destinations:
  gateway: { url: "http://gateway.example/approve" }
  events:  { url: "kafka://broker:9092" }
routes:
  - match: { event_type: ApprovalRequested }
    to: [gateway, events]
  - match: { aggregate_type: merchant }
    to: [events]
`

func newRouter(t *testing.T) (*Router, *copier, *copier) {
	t.Helper()
	cfg, err := destconfig.Parse("payments.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	gw, ev := &copier{}, &copier{}
	r, err := NewRouter(cfg, "outbox_events", []Destination{{"gateway", "outbox_events_to_gateway", gw}, {"events", "outbox_events_to_events", ev}})
	if err != nil {
		t.Fatal(err)
	}
	return r, gw, ev
}

func msg(id int64, aggType, aggID, eventType string) outbox.Message {
	return outbox.Message{ID: id, AggregateType: aggType, AggregateID: aggID, EventType: eventType}
}

func TestRouterCopiesEachEventToItsRouteDestinationsInOneStatementEach(t *testing.T) {
	r, gw, ev := newRouter(t)
	errs := r.Publish(context.Background(), []outbox.Message{
		msg(1, "payment", "p1", "ApprovalRequested"),
		msg(2, "merchant", "m1", "MerchantUpdated"),
		msg(3, "payment", "p1", "ApprovalRequested"),
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if want := [][]int64{{1, 3}}; !slices.EqualFunc(gw.calls, want, slices.Equal) {
		t.Errorf("gateway copies %v, want %v", gw.calls, want)
	}
	if want := [][]int64{{1, 2, 3}}; !slices.EqualFunc(ev.calls, want, slices.Equal) {
		t.Errorf("events copies %v, want %v", ev.calls, want)
	}
}

func TestRouterFailsAnUnroutedEventForGoodAndHoldsItsAggregate(t *testing.T) {
	r, gw, ev := newRouter(t)
	errs := r.Publish(context.Background(), []outbox.Message{
		msg(1, "payment", "p1", "Refunded"), // no route
		msg(2, "payment", "p1", "ApprovalRequested"),
		msg(3, "payment", "p2", "ApprovalRequested"),
	})
	if !errors.Is(errs[0], ErrNoRoute) || !outbox.IsPermanent(errs[0]) {
		t.Fatalf("unrouted event: %v, want a permanent ErrNoRoute", errs[0])
	}
	if !errors.Is(errs[1], outbox.ErrNotAttempted) {
		t.Fatalf("the next event of its aggregate: %v, want ErrNotAttempted", errs[1])
	}
	if errs[2] != nil {
		t.Fatalf("another aggregate: %v", errs[2])
	}
	if want := [][]int64{{3}}; !slices.EqualFunc(gw.calls, want, slices.Equal) || !slices.EqualFunc(ev.calls, want, slices.Equal) {
		t.Errorf("copies gateway %v, events %v; want only id 3 at each", gw.calls, ev.calls)
	}
}

func TestRouterCopyFailureFailsOnlyTheEventsRoutedThere(t *testing.T) {
	r, _, ev := newRouter(t)
	ev.err = errors.New("connection reset")
	errs := r.Publish(context.Background(), []outbox.Message{
		msg(1, "merchant", "m1", "MerchantUpdated"),  // events only: fails
		msg(2, "merchant", "m1", "MerchantUpdated"),  // behind it: not attempted
		msg(3, "payment", "p1", "ApprovalRequested"), // gateway and events: fails
		msg(4, "merchant", "m2", "MerchantUpdated"),  // events: fails
	})
	if errs[0] == nil || errors.Is(errs[0], outbox.ErrNotAttempted) || outbox.IsPermanent(errs[0]) {
		t.Errorf("message 1: %v, want the retryable copy error", errs[0])
	}
	if !errors.Is(errs[1], outbox.ErrNotAttempted) {
		t.Errorf("message 2: %v, want ErrNotAttempted", errs[1])
	}
	if errs[2] == nil || errs[3] == nil {
		t.Errorf("messages 3 and 4: %v, %v; want the copy error", errs[2], errs[3])
	}
}
