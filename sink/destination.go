package sink

import "github.com/txoutbox/outbox"

// Destinations is implemented by sinks that can say where a message goes
// before it is sent: the Kafka topic, NATS subject, AMQP routing key,
// Redis stream or HTTP URL that routing computes for it. The relay uses it
// to name a message's route in metrics, logs and the circuit breaker, so
// that one destination's outage is told apart from another's.
type Destinations interface {
	// Destination returns the route of m: a short, bounded-cardinality
	// name such as "payment.events" or "https://gateway.example/approve"
	// (without credentials or query secrets).
	Destination(m *outbox.Message) string
}

// DefaultDestination is the route of messages whose sink does not
// implement [Destinations].
const DefaultDestination = "default"

// DestinationOf returns s's destination for m, or [DefaultDestination]
// when s does not implement [Destinations] or returns "".
func DestinationOf(s Sink, m *outbox.Message) string {
	if d, ok := s.(Destinations); ok {
		if r := d.Destination(m); r != "" {
			return r
		}
	}
	return DefaultDestination
}
