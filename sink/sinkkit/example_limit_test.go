package sinkkit_test

import (
	"context"
	"fmt"

	"github.com/txoutbox/outbox"

	"github.com/txoutbox/outbox/sink/discard"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// Limit keeps each route of a sink within a rate and a number of messages
// in flight; the limits of the sink URL and of one route, as the CLI
// reads them.
func ExampleLimit() {
	raw, each, err := sinkkit.CutLimits("discard://?rate=200/s&burst=50&max_in_flight=32")
	if err != nil {
		panic(err)
	}
	route, audit, err := sinkkit.ParseRouteLimit("discard=rate=100/s,max_in_flight=8", each)
	if err != nil {
		panic(err)
	}
	fmt.Println(raw, "| each route:", each, "|", route+":", audit)

	l, err := sinkkit.Limit(discard.New(), sinkkit.LimitConfig{Default: each, Routes: map[string]sinkkit.Limits{route: audit}})
	if err != nil {
		panic(err)
	}
	defer l.Close(context.Background())
	m := outbox.Message{EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: "tx-1", EventType: "ApprovalRequested", Payload: []byte(`{}`)}
	fmt.Println(l.Destination(&m), l.Publish(context.Background(), []outbox.Message{m}))
	// Output:
	// discard:// | each route: rate=200/s,burst=50,max_in_flight=32 | discard: rate=100/s,burst=50,max_in_flight=8
	// discard [<nil>]
}
