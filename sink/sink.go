// Package sink draws the seam between the relay and a destination: the
// [Sink] interface that the HTTP, stdout, discard and broker sinks
// implement, and the contract every one of them must keep. The shared
// conformance suite in sink/sinktest checks that contract.
//
// It also holds what the sinks share: routing ([Router]) and the check of
// the destinations it computes ([DestinationError]), broker headers, the
// checks before a message is sent and the not-attempted errors they give
// ([Precheck], [NotSentError], [Calls]), the reading of sink URL options
// ([URLOptions], [RedactURL], [Invalid]), the CloudEvents mapping
// ([CloudEventAttributes], [CloudEventJSON], [Format]), and the optional
// interfaces a sink implements for the relay: [Destinations] (the route of
// a message) and [Health] (whether the destination is reached).
//
// [Limit] wraps any sink so that each route stays within a rate (token
// bucket with burst) and a number of messages in flight: over the limit,
// Publish waits (backpressure), and a message whose deadline would pass
// while it waits is not sent.
package sink

import (
	"context"

	"github.com/txoutbox/outbox"
)

// Sink delivers messages.
//
// The contract:
//
//   - Publish returns exactly one result per message, in order: nil means
//     the destination acknowledged the message (HTTP 2xx, a broker ack);
//     anything else means it may not have.
//   - Messages that share an ordering key (msgs[i].OrderingKey()) arrive in
//     the order given. Once one of them fails, the later ones of that key in
//     the same call must not be delivered: report them as
//     [outbox.ErrNotAttempted] (possibly wrapped).
//   - Classify failures with [outbox.Permanent] and [outbox.Retryable];
//     unclassified errors count as retryable.
//   - A message must not be sent after its Deadline (when set).
//   - Publish honours ctx: once it is done, unsent messages fail with the
//     context's error.
//   - Publish may be called concurrently. After Close, Publish fails every
//     message with [outbox.ErrClosed].
type Sink interface {
	Publish(ctx context.Context, msgs []outbox.Message) []error
	// Close flushes what is buffered and releases connections.
	Close(ctx context.Context) error
}

// Fill returns a result slice of len(msgs) with every element set to err.
func Fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}
