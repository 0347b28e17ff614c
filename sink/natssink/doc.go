// Package natssink is the NATS JetStream sink: it publishes each event to
// a JetStream stream and reports it delivered only once the stream has
// stored it.
//
// # What delivered means
//
// An event is delivered when JetStream answered its publish with a PubAck:
// a stream stored the message (or had already stored one with the same
// Nats-Msg-Id within its duplicate window). A plain NATS publish that no
// stream captures is never reported delivered.
//
// # The message
//
//	subject        from the route: Config.Route (default
//	               {aggregate_type}.events, so payment.events) or the
//	               Config.RouteOverrides template of the aggregate type
//	data           the event's payload JSON, byte for byte
//	Nats-Msg-Id    the event id, so JetStream drops a repeat published
//	               within the stream's duplicate window (2 minutes unless
//	               the stream says otherwise)
//	outbox-event-id, outbox-event-type, outbox-aggregate-type,
//	outbox-aggregate-id, outbox-attempt
//	               see [sink.BrokerHeaders]; then the event's own headers
//
// # Order and throughput
//
// A Publish call sends the first event of every aggregate at once, with
// JetStream's asynchronous publish, and every PubAck is awaited. Within one
// aggregate, the next event is sent only after the previous one's PubAck.
// Pipelining within an aggregate would be faster for long runs of one
// aggregate, but it is not safe: when an earlier event fails (a PubAck
// timeout, "no responders" during a leader election, a connection lost
// with the event in a socket buffer) a later one may still be stored,
// and the retry of the earlier one would then land behind it; reporting
// the later one as failed cannot take it out of the stream. So once an
// event fails, the later events of its aggregate in the call are not sent
// and report [outbox.ErrNotAttempted]; events of other aggregates go on.
//
// # Failures
//
// Retryable: no responders (no stream, or JetStream not ready), a PubAck
// timeout (Config.PublishTimeout), a lost or reconnecting connection, a
// cancelled context, and any error not listed below.
//
// Permanent, with the reason: a message larger than the server's
// max_payload, an invalid subject (see Subjects below),
// a message over the stream's max_msg_size or header limit, a full stream
// with the discard-new policy ("maximum messages/bytes exceeded"), and a
// subject no stream captures when stream creation is off.
//
// An event whose Deadline has passed is not sent.
//
// # Subjects
//
// The subject comes from event data (the aggregate type, say), so the
// sink checks it before it looks up or changes any stream: no * or >
// anywhere (a stream subject with a wildcard would capture more than the
// event's subject), no token starting with '$' (the server's $SYS and
// JetStream's $JS subjects), no empty token, no whitespace or control
// character, valid UTF-8, at most 1024 bytes. A subject that breaks a
// rule fails its event permanently with a [sink.DestinationError] naming
// the field and the value; it is never added to a stream. A route with
// no placeholder is checked once, by New.
//
// # Formats
//
// Config.Format (format= in the URL) selects the CloudEvents 1.0 formats
// of the NATS binding: cloudevents puts the attributes in ce-* headers
// (ce-id, ce-source, ce-type, ce-subject, ce-time, ce-aggregatetype,
// ce-sequence, ce-traceparent) and content-type: application/json, with
// the payload as the data; cloudevents-structured sends the event in the
// JSON format (content-type: application/cloudevents+json). See
// [sink.CloudEventAttributes] for the mapping. The outbox headers and
// Nats-Msg-Id are there in every format.
//
// # Streams
//
// The first time the sink publishes to a subject it asks the server which
// stream captures it (the stream-by-subject lookup). A stream that does is
// used as it is, whatever its name. When none does, and
// [Config.NoCreateStream] is not set, the sink creates the stream
// Config.Stream (default OUTBOX) on Config.StreamSubjects (default
// *.events) plus the subject if they do not cover it, with file storage
// and the server's defaults otherwise; if that stream exists already, the
// subject is added to it. Servers from NATS 2.10 on refuse a stream subject
// such as *.events that could also capture JetStream's own $JS.events,
// and a server refuses subjects that overlap another stream's: the sink
// then creates the stream on the concrete subject alone and adds each
// later subject as it first publishes to it. Should the stream disappear,
// a publish that finds no responders makes the sink look the subject up
// again on the next call.
//
// # Connection and restarts
//
// [New] does not wait for the server: it connects in the background,
// retrying every Config.ReconnectWait, forever, and logs the first
// failure at WARN. Until the server was reached and JetStream answered
// (a server without JetStream is reported too), Publish fails every
// message at once, retryably, with the reason; [Sink.Reachable] says
// whether the server is reached. Once connected, the sink reconnects on
// its own. While it is disconnected, publishes are buffered (Config.ReconnectBufSize) and sent
// once it is back; an event whose PubAck does not come within
// PublishTimeout, or whose publish was in flight when the connection
// dropped, fails retryably, and the relay sends it again. A repeat within
// the duplicate window is dropped by the stream, so a server restart
// yields no duplicates in the stream unless an event is retried after its
// window ended: a publish the server stored just before it stopped, whose
// PubAck was lost, is sent again only once the server is back. To ride out
// longer outages without repeats, create the stream with a duplicate
// window (Duplicates) longer than them before the relay starts; the sink
// uses an existing stream as it is. [Sink.Close] waits for the calls in flight, then drains
// the connection.
//
// # URL form
//
// [ParseURL] reads nats://host:4222?subject=TEMPLATE&stream=OUTBOX; see it
// for every option.
package natssink
