package sink

import ()

// Header names the broker sinks put on every message (lower case, as Kafka,
// NATS, AMQP and Redis carry them). The HTTP sink uses the Outbox-* forms.
const (
	HeaderEventID       = "outbox-event-id"
	HeaderEventType     = "outbox-event-type"
	HeaderAggregateType = "outbox-aggregate-type"
	HeaderAggregateID   = "outbox-aggregate-id"
	HeaderAttempt       = "outbox-attempt"
)

// Event headers the sinks give a meaning to. Every sink carries them as
// it carries any event header (HTTP header, Kafka record header, NATS
// header, AMQP header, Redis stream field), under these names; the
// CloudEvents formats also map them to attributes.
const (
	// HeaderTraceparent and HeaderTracestate are the W3C Trace Context
	// of the event (the relay sets traceparent to its publish span).
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
	// HeaderAggregateSeq is the event's position in its aggregate, when
	// the store assigns one: the CloudEvents "sequence" extension.
	HeaderAggregateSeq = "outbox-aggregate-seq"
)
