// Package tracing carries OpenTelemetry trace context through the outbox:
// from the producer's span into the event's headers at Enqueue, and from
// there to a publish span the relay starts for each message, whose own
// traceparent travels to the consumer in the message's headers.
//
//	st, _ := postgres.New(pool, postgres.Config{ContextHeaders: tracing.InjectHeaders})
//	r, _ := relay.New(relay.Config{Store: st, Sink: sk, Tracer: tracing.NewPublisher(tracing.Config{System: "kafka"})})
//
// What it guarantees:
//
//   - InjectHeaders writes the W3C traceparent (and tracestate) of the
//     caller's span, and nothing when the context has no span.
//   - Each published message gets a span of kind PRODUCER named
//     "publish <route>", linked to the producer's span (from the event's
//     traceparent), with the messaging semantic-convention attributes
//     messaging.system, messaging.destination.name, messaging.message.id
//     and messaging.operation ("publish"; messaging.operation.type "send").
//     The message's headers carry that span's traceparent instead of the
//     producer's; the event row keeps the producer's.
//   - A failed delivery marks its span with the error.
//   - The package installs no exporter and no global provider: spans go to
//     Config.TracerProvider, or otel's global one (a no-op until the
//     application sets one).
package tracing
