package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/inbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/httpsink"
)

// The inbox reads the header names the broker sinks write.
func TestHeaderNamesMatchTheSinks(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{
		{inbox.HeaderEventID, sink.HeaderEventID},
		{inbox.HeaderAggregateType, sink.HeaderAggregateType},
		{inbox.HeaderAggregateID, sink.HeaderAggregateID},
		{inbox.HeaderAggregateSeq, sink.HeaderAggregateSeq},
	} {
		if c[0] != c[1] {
			t.Errorf("inbox reads %q, the sinks write %q", c[0], c[1])
		}
	}
}

// A request the HTTP sink sends gives the inbox its event id and
// aggregate.
func TestFromRequestOfTheSink(t *testing.T) {
	t.Parallel()
	got := make(chan inbox.Message, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := inbox.FromRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- m
	}))
	defer srv.Close()
	s, err := httpsink.New(httpsink.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer s.Close(ctx)
	m := outbox.Message{ID: 1, EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: "tx-1001",
		EventType: "ChargeRequested", Payload: json.RawMessage(`{"amount":1500}`), Attempt: 1, CreatedAt: time.Now()}
	if errs := s.Publish(ctx, []outbox.Message{m}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if g := <-got; g.EventID != m.EventID.String() || g.AggregateType != "payment" || g.AggregateID != "tx-1001" {
		t.Fatalf("FromRequest = %+v, want event %s of payment/tx-1001", g, m.EventID)
	}
}

func TestFromHeaders(t *testing.T) {
	t.Parallel()
	h := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	full := h("outbox-event-id", "evt-1", "outbox-aggregate-type", "payment", "outbox-aggregate-id", "tx-1", "outbox-aggregate-seq", "12")
	if got, err := inbox.FromHeaders(full, "evt-1"); err != nil || got != (inbox.Message{EventID: "evt-1", AggregateType: "payment", AggregateID: "tx-1", Seq: 12}) {
		t.Fatalf("FromHeaders = %+v, %v", got, err)
	}
	if got, err := inbox.FromHeaders(h(), "", "key-9"); err != nil || got.EventID != "key-9" {
		t.Fatalf("id from the second source: %+v, %v", got, err)
	}
	for _, c := range []struct {
		name string
		get  func(string) string
		ids  []string
		is   error
	}{
		{"nothing", h(), nil, inbox.ErrNoEventID},
		{"ids disagree", h("outbox-event-id", "a"), []string{"b"}, inbox.ErrInvalidMessage},
		{"sequence not a number", h("outbox-event-id", "a", "outbox-aggregate-type", "p", "outbox-aggregate-id", "1", "outbox-aggregate-seq", "x"), nil, inbox.ErrInvalidMessage},
		{"sequence 0", h("outbox-event-id", "a", "outbox-aggregate-type", "p", "outbox-aggregate-id", "1", "outbox-aggregate-seq", "0"), nil, inbox.ErrInvalidMessage},
		{"sequence without aggregate", h("outbox-event-id", "a", "outbox-aggregate-seq", "3"), nil, inbox.ErrInvalidMessage},
	} {
		if _, err := inbox.FromHeaders(c.get, c.ids...); !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	if _, err := inbox.FromRequest(r); !errors.Is(err, inbox.ErrNoEventID) {
		t.Fatalf("a request without ids: %v", err)
	}
	r.Header.Set("Outbox-Event-Id", "evt-3")
	r.Header.Set("Outbox-Aggregate-Type", "payment")
	r.Header.Set("Outbox-Aggregate-Id", "tx-3")
	r.Header.Set("Outbox-Aggregate-Seq", "2")
	if got, err := inbox.FromRequest(r); err != nil || got != (inbox.Message{EventID: "evt-3", AggregateType: "payment", AggregateID: "tx-3", Seq: 2}) {
		t.Fatalf("FromRequest = %+v, %v", got, err)
	}
}
