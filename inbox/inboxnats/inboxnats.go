// Package inboxnats takes the inbox.Message from a NATS message that the
// relay's NATS JetStream sink published: the event id from the
// outbox-event-id header (or Nats-Msg-Id, which the sink sets to the same
// id for JetStream's own duplicate window), the aggregate from
// outbox-aggregate-type and outbox-aggregate-id, the sequence from
// outbox-aggregate-seq.
//
// JetStream drops repeats only within its duplicate window (2 minutes by
// default) and only on publish; a redelivery to a consumer (no ack in
// time, a consumer restart) is not dropped. The inbox is what makes the
// consumer's effects happen once.
//
// It is its own package so that consumers that do not read NATS do not
// import nats.go.
package inboxnats

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/txoutbox/outbox/inbox"
)

// MsgIDHeader is JetStream's message id header.
const MsgIDHeader = "Nats-Msg-Id"

// FromMsg returns the Message m carries. A message without an event id
// gets an error matching inbox.ErrNoEventID.
func FromMsg(m *nats.Msg) (inbox.Message, error) {
	if m == nil {
		return inbox.Message{}, fmt.Errorf("%w: nil NATS message", inbox.ErrInvalidMessage)
	}
	return FromHeader(m.Header)
}

// FromHeader returns the Message carried by the headers h, for example
// a jetstream.Msg's Headers().
func FromHeader(h nats.Header) (inbox.Message, error) {
	return inbox.FromHeaders(h.Get, h.Get(MsgIDHeader))
}
