// Package amqpsink is the RabbitMQ (AMQP 0-9-1) sink: it publishes each
// event to a topic exchange with publisher confirms and the mandatory
// flag, and reports it delivered only once the broker confirmed it and did
// not return it.
//
// # What delivered means
//
// An event is delivered when the broker acknowledged it (basic.ack in
// confirm mode) and did not return it as unroutable first. With mandatory
// set, a message that no queue is bound to receive comes back as
// basic.return followed by basic.ack; the broker would otherwise confirm it
// and drop it. The sink correlates the two (the return always precedes the
// ack of the same message, and one goroutine takes both in order) and
// reports such an event as a retryable error, never as delivered: bind a
// queue and the relay's retry delivers it. For a persistent message routed
// to durable queues, the ack means the queues have written it to disk.
//
// # The message
//
//	exchange        Config.Exchange (default outbox): a durable topic
//	                exchange, declared if it does not exist
//	routing key     from the route: Config.Route (default
//	                {aggregate_type}.events, so payment.events) or the
//	                Config.RouteOverrides template of the aggregate type
//	body            the event's payload JSON, byte for byte
//	content-type    application/json
//	delivery-mode   2 (persistent)
//	message-id      the event id: consumers drop repeats by it (RabbitMQ
//	                does not deduplicate)
//	type            the event type
//	timestamp       the event's created_at
//	app-id          outbox
//	headers         outbox-event-id, outbox-event-type,
//	                outbox-aggregate-type, outbox-aggregate-id,
//	                outbox-attempt (see [sink.BrokerHeaders]), then the
//	                event's own headers
//
// # Order and throughput
//
// All publishes go over one channel, which the broker routes in order, so
// a queue bound to an aggregate's routing key receives its events in
// publish order. A Publish call sends the first event of every aggregate
// at once and awaits every confirm (at most 1024 unconfirmed messages at a
// time); within one aggregate, the next event is sent only after the
// previous one's confirm. Pipelining within an aggregate is not safe: a
// queue that rejects publishes while full (x-overflow reject-publish) can
// nack one event and accept the next, and a binding can appear between
// two publishes, so a later event could be queued ahead of the retry of an
// earlier one. Once an event fails, the later events of its aggregate in
// the call are not sent and report [outbox.ErrNotAttempted]; events of
// other aggregates go on.
//
// # Failures
//
// Retryable: a return (unroutable), a nack, no confirm within
// Config.PublishTimeout, a channel or connection closed before the
// confirm, the broker blocking publishers (a memory or disk alarm), no
// connection (the sink is reconnecting), a cancelled context.
//
// Permanent, with the reason: a payload larger than Config.MaxMessageSize
// (default 128 MiB, RabbitMQ's default max_message_size; it is checked
// before sending, because the broker refuses an oversized message by
// closing the channel, which fails every unconfirmed message on it), an
// oversized message the broker refused anyway (the sink then lowers its
// limit to the one the broker named), and a routing key over 255 bytes or
// not valid UTF-8 (it comes from event data; a [sink.DestinationError]
// names the field and the value, and nothing is sent).
//
// # Formats
//
// Config.Format (format= in the URL) selects the CloudEvents 1.0 formats
// of the AMQP binding: cloudevents puts the attributes in headers
// prefixed cloudEvents: (RabbitMQ carries AMQP 1.0 application
// properties as these headers) with content-type application/json and
// the payload as the body; cloudevents-structured sends the event in the
// JSON format with content-type application/cloudevents+json. See
// [sink.CloudEventAttributes] for the mapping. The other properties and
// the outbox headers are there in every format.
//
// An event whose Deadline has passed is not sent.
//
// # Connection and restarts
//
// [New] does not wait for the broker: in the background the sink
// connects, checks that the exchange exists with a passive declare and
// declares it (topic, durable) only if it does not, and opens a channel
// in confirm mode; a failed attempt is logged at WARN and retried. While
// it is not connected, Publish fails at once, retryably (a call made
// before the first attempt has finished waits for it); [Sink.Reachable]
// says whether the broker is reached. When the channel or the connection closes (a
// broker restart, a network failure, a channel error) the sink dials
// again on its own, forever, pausing Config.ReconnectWait and up to ten
// times that between attempts; meanwhile publishes fail at once,
// retryably. Unconfirmed messages of a closed channel fail retryably: the
// broker may still have queued them, so the relay's retry can deliver an
// event twice (at least once; consumers drop repeats by message-id).
// [Sink.Close] waits for the calls in flight, then closes the channel and
// the connection.
//
// # URL form
//
// [ParseURL] reads amqp://user:password@host:5672/vhost?exchange=outbox&routing_key=TEMPLATE;
// see it for every option.
package amqpsink
