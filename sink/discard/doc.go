// Package discard is the discard sink (URL form discard://): it
// acknowledges every message and drops it, counting how many it took. It
// measures the relay without a destination's cost, in benchmarks and
// tests.
//
// # What delivered means
//
// A message is delivered when it is counted. It is not counted, and fails,
// when the Publish context has already ended or its Deadline has passed;
// the later messages of its aggregate in the same call then report
// [outbox.ErrNotAttempted], as the [sink.Sink] contract asks.
//
// Its route (Destination) is "discard" for every message, and it is
// always reachable.
package discard
