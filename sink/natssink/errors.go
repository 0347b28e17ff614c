package natssink

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/txoutbox/outbox"
)

// classify wraps a publish failure of message m on subject as permanent
// or retryable, with a reason a person can act on.
func (s *Sink) classify(m *outbox.Message, subject string, err error) error {
	prefix := fmt.Sprintf("nats sink: event %s to %s", m.EventID, subject)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return outbox.Permanent(fmt.Errorf("%s: the message (%d bytes of payload plus headers) exceeds the server's max_payload of %d bytes: %w",
			prefix, len(m.Payload), s.nc.MaxPayload(), err))
	case errors.Is(err, nats.ErrBadSubject):
		return outbox.Permanent(fmt.Errorf("%s: invalid subject: %w", prefix, err))
	case errors.As(err, &apiErr):
		return classifyAPIError(prefix, apiErr)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return outbox.Retryable(fmt.Errorf("%s: no JetStream stream answered (JetStream unavailable, or the stream was deleted): %w", prefix, err), 0)
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, nats.ErrTimeout):
		return outbox.Retryable(fmt.Errorf("%s: no PubAck within %s: %w", prefix, s.cfg.PublishTimeout, err), 0)
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrReconnectBufExceeded),
		errors.Is(err, nats.ErrConnectionDraining), errors.Is(err, nats.ErrStaleConnection):
		return outbox.Retryable(fmt.Errorf("%s: connection lost before the PubAck: %w", prefix, err), 0)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outbox.Retryable(fmt.Errorf("%s: gave up waiting for the PubAck: %w", prefix, err), 0)
	}
	return outbox.Retryable(fmt.Errorf("%s: %w", prefix, err), 0)
}

// classifyAPIError sorts the errors a stream puts in a PubAck.
func classifyAPIError(prefix string, e *jetstream.APIError) error {
	switch e.ErrorCode {
	case jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return outbox.Permanent(fmt.Errorf("%s: the message exceeds the stream's max_msg_size: %w", prefix, e))
	case 10097: // JSStreamHeaderExceedsMaximumErr
		return outbox.Permanent(fmt.Errorf("%s: the headers exceed the stream's limit: %w", prefix, e))
	case 10077: // JSStreamStoreFailedF: the store refused the message
		d := strings.ToLower(e.Description)
		for _, limit := range []string{"maximum messages", "maximum bytes", "message too large"} {
			if strings.Contains(d, limit) {
				return outbox.Permanent(fmt.Errorf("%s: the stream is full and discards new messages (%s): %w", prefix, e.Description, e))
			}
		}
	}
	return outbox.Retryable(fmt.Errorf("%s: %w", prefix, e), 0)
}
