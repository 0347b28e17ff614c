package sinkkit

import (
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

func TestBrokerHeaders(t *testing.T) {
	a := outbox.Message{AggregateType: "payment", AggregateID: "a", Headers: map[string]string{"outbox-event-id": "forged", "traceparent": "t"}}
	h := BrokerHeaders(&a)
	seen := map[string]string{}
	for _, kv := range h {
		if _, dup := seen[kv[0]]; dup {
			t.Fatalf("header %s twice", kv[0])
		}
		seen[kv[0]] = kv[1]
	}
	if seen[sink.HeaderEventID] == "forged" || seen["traceparent"] != "t" {
		t.Fatalf("headers = %v", seen)
	}
}
