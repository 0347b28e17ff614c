package stdoutsink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/stdoutsink"
)

func Example() {
	id, _ := outbox.ParseEventID("0190b6c8-8a2e-7c3e-9f1a-2b3c4d5e6f70")
	s := stdoutsink.New(stdoutsink.Config{}) // os.Stdout
	defer s.Close(context.Background())

	results := s.Publish(context.Background(), []outbox.Message{{
		ID: 1, EventID: id, AggregateType: "payment", AggregateID: "tx-1",
		EventType: "ApprovalRequested", Payload: json.RawMessage(`{"amount": 1000}`),
		Attempt: 1, CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}})
	fmt.Println("delivered:", results[0] == nil)
	// Output:
	// {"id":1,"event_id":"0190b6c8-8a2e-7c3e-9f1a-2b3c4d5e6f70","aggregate_type":"payment","aggregate_id":"tx-1","event_type":"ApprovalRequested","attempt":1,"created_at":"2026-03-01T12:00:00Z","payload":{"amount":1000}}
	// delivered: true
}
