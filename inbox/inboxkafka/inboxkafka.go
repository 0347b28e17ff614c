// Package inboxkafka takes the inbox.Message from a Kafka record (franz-go)
// that the relay's Kafka sink produced: the event id from the
// outbox-event-id header, the aggregate from outbox-aggregate-type and
// outbox-aggregate-id, the sequence from outbox-aggregate-seq.
//
//	for _, rec := range fetches.Records() {
//		m, err := inboxkafka.FromRecord(rec)
//		if err != nil { ... }                // no event id: nothing recorded
//		tx, _ := db.BeginTx(ctx, nil)
//		res, err := ib.HandleMessage(ctx, tx, "ledger", m, func(ctx context.Context) error { ... })
//		...
//	}
//
// It is its own package so that consumers that do not read Kafka do not
// import franz-go.
package inboxkafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox/inbox"
)

// FromRecord returns the Message r carries. A record without an
// outbox-event-id header gets an error matching inbox.ErrNoEventID.
func FromRecord(r *kgo.Record) (inbox.Message, error) {
	if r == nil {
		return inbox.Message{}, fmt.Errorf("%w: nil Kafka record", inbox.ErrInvalidMessage)
	}
	return inbox.FromHeaders(func(name string) string {
		for _, h := range r.Headers {
			if h.Key == name {
				return string(h.Value)
			}
		}
		return ""
	})
}
