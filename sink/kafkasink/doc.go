// Package kafkasink is the Kafka sink: it produces each event as a record
// with franz-go (github.com/twmb/franz-go), with acks=all and the
// idempotent producer.
//
// # What delivered means
//
// A message is delivered when every in-sync replica of its partition has
// the record: the broker acknowledged a produce request with acks=all.
// With the topic's min.insync.replicas above 1,
// that survives the loss of a broker. Nothing else counts: a message whose
// acknowledgement did not come within [Config.ProduceTimeout] is reported
// as a retryable failure, although it may have been written.
//
// # The record
//
//	topic    Config.Route with the event's values ({aggregate_type}.events by
//	         default: payment.events), or the RouteOverrides entry of its
//	         aggregate type (--route merchant=merchant.audit)
//	key      the aggregate id, so that one aggregate's events share a partition
//	value    the event's payload, byte for byte
//	headers  outbox-event-id, outbox-event-type, outbox-aggregate-type,
//	         outbox-aggregate-id, outbox-attempt, in that order, then the
//	         event's own headers (traceparent, ...), which cannot replace them
//
// Topics are not created by the sink: a topic that does not exist is a
// permanent failure, unless [Config.AllowAutoTopicCreation] asks the
// broker to create it.
//
// # Order
//
// Records of one key go to one partition (franz-go's default partitioner
// hashes the key as the Java client does), and the idempotent producer
// keeps a partition's records in produce order through its own retries.
// Within a Publish call, a failure stops its aggregate: once a message
// fails, the later ones of the same aggregate are not handed to the
// producer, and those already buffered behind it in the partition are
// failed by franz-go together with it (verified by a test against
// franz-go): they are reported as [outbox.ErrNotAttempted] when the broker
// refused the batch ahead of them, or as retryable when a timeout left the
// outcome unknown. The one exception is a record produced in the
// moment between its predecessor's failure and the sink learning of it:
// the broker may have written it, and it is then reported as a retryable
// failure that says so, so the relay sends it again after its predecessor
// (a consumer sees it twice). Order holds per topic: a route with
// {event_type} spreads one aggregate over several topics, and Kafka keeps
// no order across topics.
//
// # Duplicates
//
// Kafka does not drop a record because its event id was seen before: the
// idempotent producer only removes the duplicates of franz-go's own
// retries. A relay retry after a timeout, a crash between the acknowledgement
// and the mark, or a broker restart can write an event twice; consumers drop
// repeats by the outbox-event-id header.
//
// # Failures
//
//	retryable  broker unreachable or restarting, no acknowledgement within
//	           ProduceTimeout, not leader / not enough replicas / other
//	           retriable Kafka errors, any unknown error
//	permanent  record larger than MaxMessageBytes (checked before sending,
//	           with the sizes in the error), record refused as too large by
//	           the broker on its own, topic missing, invalid topic name,
//	           topic or cluster authorization failed, invalid record, policy
//	           violation, unsupported compression or message format
//
// Permanent errors end the event FAILED at once; retryable ones follow the
// relay's retry policy. When a broker refuses a record batch as too large,
// the batch may hold innocent records, so the sink resends the refused
// aggregates' messages one at a time, in order, and only a record refused
// on its own fails permanently. Keep [Config.MaxMessageBytes] at or below
// the topics' max.message.bytes so this slow path never runs.
//
// # Deadlines and timeouts
//
// A message whose Deadline has passed is not handed to the producer. The
// producer is configured to let a record's context end its wait even when
// the record was already sent to a broker that did not answer
// (AllowIdempotentProduceCancellation; idempotence stays on, and franz-go
// bumps the producer epoch before producing again, so order holds): a
// buffered record is dropped when its deadline or the Publish timeout
// passes instead of being written late. franz-go checks the context of the
// record that heads a partition's batch, so a record with a deadline that
// sits behind another in the same batch can still be written up to
// ProduceTimeout after its deadline when the brokers were unreachable.
//
// # Formats
//
// Config.Format (format= in the URL) selects another record layout; the
// key is the aggregate id and the outbox headers and the event's own are
// there in each:
//
//	cloudevents             CloudEvents 1.0, binary mode of the Kafka binding:
//	                        ce_specversion, ce_id, ce_source, ce_type,
//	                        ce_subject, ce_time, ce_aggregatetype,
//	                        ce_sequence, ce_traceparent headers and
//	                        content-type: application/json; the payload as
//	                        the value ([sink.CloudEventAttributes])
//	cloudevents-structured  the CloudEvent in the JSON format as the value,
//	                        content-type: application/cloudevents+json
//	debezium                the record of Debezium's outbox event router:
//	                        header id = the event id (first), the payload as
//	                        the value, topic outbox.event.<aggregate_type>
//	                        unless Route or a route override says otherwise
//
// # Topic names
//
// The topic comes from event data, so the sink checks it before it hands
// the record over: Kafka's rules (1 to 249 of ASCII letters, digits, '.',
// '_' and '-', not "." or ".."). A bad one fails the event permanently
// with a [sink.DestinationError] naming the field and the value; no topic
// is created, even with AllowAutoTopicCreation.
//
// # Broker restarts and a broker down at start
//
// [New] does not contact the brokers; in the background the sink asks
// them for metadata until one answers, logging at WARN while none can be
// reached, and [Sink.Reachable] says whether they are. The client
// reconnects on its own. While no broker answers, Publish
// returns retryable errors after ProduceTimeout and the relay backs off
// and retries; once a broker is back, delivery resumes. A record that was
// in flight when the broker went away is either acknowledged after the
// reconnect or reported failed and sent again by the relay, so a restart
// can duplicate, never lose, an acknowledged event (given acks=all and a
// broker that keeps acknowledged records).
//
// # URL form
//
// [ParseURL] reads kafka://host:9092[,host2:9092]?topic={aggregate_type}.events
// and the options client_id, max_message_bytes, produce_timeout, linger,
// tls and auto_create_topics. SASL is not supported yet.
package kafkasink
