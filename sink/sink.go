// Package sink draws the seam between the relay and a destination: the
// [Sink] interface that the HTTP, stdout, discard and broker sinks
// implement, and the contract every one of them must keep. The shared
// conformance suite in sink/sinktest checks that contract.
//
// It also holds routing ([Router]) and the error of a destination a sink
// refuses ([DestinationError]), the broker header names, the errors the
// relay acts on ([TooLateError], [ErrNotEnoughTimeLeft]) and the
// configuration error of a sink ([Invalid]), and the optional interfaces a
// sink implements for the relay: [Destinations] (the route of a message)
// and [Health] (whether the destination is reached).
//
// What a sink uses to keep the contract (the checks before a message is
// sent, sending by ordering key, sink URL options, per-route limits, the
// CloudEvents mapping, destination-name checks) is in sink/sinkkit.
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
