// Package inboxamqp takes the inbox.Message from an AMQP 0-9-1 delivery
// (amqp091-go) that the relay's RabbitMQ sink published: the event id from
// the outbox-event-id header or the message-id property (the sink sets
// both), the aggregate from outbox-aggregate-type and outbox-aggregate-id,
// the sequence from outbox-aggregate-seq.
//
// It is its own package so that consumers that do not read RabbitMQ do
// not import amqp091-go.
package inboxamqp

import (
	"fmt"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txoutbox/outbox/inbox"
)

// FromDelivery returns the Message d carries. A delivery without an event
// id gets an error matching inbox.ErrNoEventID.
func FromDelivery(d *amqp.Delivery) (inbox.Message, error) {
	if d == nil {
		return inbox.Message{}, fmt.Errorf("%w: nil AMQP delivery", inbox.ErrInvalidMessage)
	}
	return inbox.FromHeaders(func(name string) string { return headerString(d.Headers[name]) }, d.MessageId)
}

// headerString renders an AMQP table value that a producer may have used
// for an id or a number.
func headerString(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case []byte:
		return string(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case int16:
		return strconv.FormatInt(int64(v), 10)
	case int:
		return strconv.Itoa(v)
	default:
		return fmt.Sprint(v)
	}
}
