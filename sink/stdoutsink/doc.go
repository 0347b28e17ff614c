// Package stdoutsink is the stdout sink (URL form stdout://): it writes one
// JSON line per event, for development, demos and piping into other tools.
//
// # What delivered means
//
// An event is delivered when its whole line was written to the writer
// (os.Stdout by default) without error, and, for a writer with a
// Flush() error method such as *bufio.Writer, when the flush at the end of
// the Publish call succeeded. A write or flush error is retryable.
//
// # The line
//
// Each line is a JSON object with these keys, in this order:
//
//	id              the outbox row id
//	event_id        the event id (a UUIDv7)
//	aggregate_type  e.g. "payment"
//	aggregate_id    e.g. the transaction number
//	event_type      e.g. "ApprovalRequested"
//	attempt         1 for the first attempt, then 2, 3, ...
//	created_at      RFC 3339 with nanoseconds, UTC
//	headers         the event's headers; left out when there are none
//	payload         the payload as JSON (not a string), compacted to one line
//
// Lines of concurrent Publish calls never interleave: one call writes at a
// time, its lines in the order given. An event past its Deadline is not
// written; once an event fails, the later events of its aggregate in the
// same call are not written either and report [outbox.ErrNotAttempted].
//
// Its route (Destination) is "stdout" for every event; Reachable is ok
// unless the last write failed.
package stdoutsink
