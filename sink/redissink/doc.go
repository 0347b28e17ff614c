// Package redissink is the Redis Streams sink: it appends each event to a
// stream with XADD, through go-redis (github.com/redis/go-redis/v9).
//
// # What delivered means
//
// A message is delivered when the server answered its XADD with the new
// entry's id. How long the entry then lives is the server's business: a
// server that keeps nothing on disk (no RDB, no AOF) loses every stream on
// a restart, and one with appendonly yes and appendfsync everysec can lose
// about a second of acknowledged entries on a crash. Use appendfsync always
// (or replicas and WAIT, which this sink does not issue) when an
// acknowledged event must survive a crash of the server.
//
// # The entry
//
//	stream  Config.Route with the event's values ({aggregate_type}.events by
//	        default: payment.events), or the RouteOverrides entry of its
//	        aggregate type (--route merchant=merchant.audit)
//	id      *, chosen by the server (increasing within a stream)
//	fields  outbox-event-id, outbox-event-type, outbox-aggregate-type,
//	        outbox-aggregate-id, outbox-attempt, payload (the event's
//	        payload JSON, byte for byte), then the event's own headers under
//	        their own names, unprefixed, as the other broker sinks carry
//	        them; an event header named "payload" is written as
//	        outbox-header-payload, and none can replace an outbox-* field
//
// With [Config.MaxLen] the command is XADD <stream> MAXLEN ~ <n> * ...;
// the server then drops the oldest entries whether or not they were read.
//
// # Order
//
// A Publish call sends its XADDs as one pipeline on one connection, in the
// order given, and Redis applies a connection's commands in order, so the
// events of one aggregate are appended in order (within a stream; a route
// with {event_type} spreads an aggregate over several streams). Redis runs
// every command of a pipeline even when an earlier one fails: when an XADD
// fails, a later one of the same aggregate may still have been appended.
// It is then reported as a retryable failure that says so, and the relay
// sends it again after its predecessor, so a consumer sees it twice. With
// the default routes an aggregate has a single stream, so the commands of
// one aggregate fail or succeed together and this does not happen.
//
// # Duplicates
//
// Redis does not drop an entry because its event id was seen before. A
// relay retry after a connection broke mid-pipeline (the outcome of the
// commands is unknown), or a crash between the reply and the mark, appends
// an event again; consumers drop repeats by the outbox-event-id field. The
// client never resends a pipeline on its own (go-redis retries are off),
// so no duplicate is created without the relay knowing of the failure.
//
// # Failures
//
//	retryable  connection refused or broken, dial or reply timeout, the
//	           server LOADING, BUSY, READONLY (a replica after failover),
//	           OOM, MASTERDOWN, MISCONF, TRYAGAIN, CLUSTERDOWN, MOVED/ASK,
//	           max clients, and authentication (NOAUTH, WRONGPASS), since
//	           a credentials fix must not dead-letter the events
//	permanent  every other error reply: WRONGTYPE (the stream name holds a
//	           key of another type), NOPERM (an ACL forbids XADD on the
//	           key), ERR ...
//
// # Deadlines and timeouts
//
// A message whose Deadline has passed is not put in the pipeline. The
// pipeline, from taking (or opening) a connection to reading the last
// reply, is bounded by [Config.Timeout]. The deadline is checked when the
// pipeline is built, so a connection that is slow to open can delay the
// send past it, by at most Timeout; with a pooled connection the gap is a
// few microseconds.
//
// # Stream keys
//
// The stream key comes from event data, so the sink checks it before the
// XADD: non-empty, at most 1024 bytes ([MaxStreamKeyBytes]), valid UTF-8
// without control characters. A bad one fails the event permanently with
// a [sink.DestinationError] naming the field and the value; no key is
// written.
//
// # Server restarts and a server down at start
//
// [New] does not wait for the server: it pings it in the background until
// it answers, logging at WARN while it cannot be reached, and
// [Sink.Reachable] says whether it is. The client reconnects on its own: while the server is down, Publish
// returns retryable errors and the relay backs off and retries; once it is
// back, delivery resumes. What the restarted server still holds depends on
// its persistence (above).
//
// # URL form
//
// [ParseURL] reads redis://[user:password@]host:6379/0?stream={aggregate_type}.events
// (rediss:// for TLS) and the options maxlen, timeout, dial_timeout and
// client_name.
package redissink
