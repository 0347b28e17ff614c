// Package inboxredis takes the inbox.Message from a Redis stream entry
// (go-redis) that the relay's Redis Streams sink appended: the event id
// from the outbox-event-id field, the aggregate from outbox-aggregate-type
// and outbox-aggregate-id, the sequence from outbox-aggregate-seq.
//
// It is its own package so that consumers that do not read Redis do not
// import go-redis.
package inboxredis

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/txoutbox/outbox/inbox"
)

// FromXMessage returns the Message the entry m carries. An entry without
// an outbox-event-id field gets an error matching inbox.ErrNoEventID.
func FromXMessage(m redis.XMessage) (inbox.Message, error) {
	return inbox.FromHeaders(func(name string) string {
		switch v := m.Values[name].(type) {
		case string:
			return v
		case nil:
			return ""
		default:
			return fmt.Sprint(v)
		}
	})
}
