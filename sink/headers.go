package sink

import (
	"strconv"

	"github.com/txoutbox/outbox"
)

// Header names the broker sinks put on every message (lower case, as Kafka,
// NATS, AMQP and Redis carry them). The HTTP sink uses the Outbox-* forms.
const (
	HeaderEventID       = "outbox-event-id"
	HeaderEventType     = "outbox-event-type"
	HeaderAggregateType = "outbox-aggregate-type"
	HeaderAggregateID   = "outbox-aggregate-id"
	HeaderAttempt       = "outbox-attempt"
)

// BrokerHeaders returns the outbox-* headers of m followed by the event's
// own headers (which cannot override the outbox-* ones), as ordered pairs.
func BrokerHeaders(m *outbox.Message) [][2]string {
	out := make([][2]string, 0, 5+len(m.Headers))
	out = append(out,
		[2]string{HeaderEventID, m.EventID.String()},
		[2]string{HeaderEventType, m.EventType},
		[2]string{HeaderAggregateType, m.AggregateType},
		[2]string{HeaderAggregateID, m.AggregateID},
		[2]string{HeaderAttempt, strconv.Itoa(m.Attempt)},
	)
	for k, v := range m.Headers {
		switch k {
		case HeaderEventID, HeaderEventType, HeaderAggregateType, HeaderAggregateID, HeaderAttempt:
			continue
		}
		out = append(out, [2]string{k, v})
	}
	return out
}

// KeyGate tracks, within one Publish call, which ordering keys have failed,
// so that the later messages of such a key are reported as not attempted.
type KeyGate map[string]error

// Blocked returns a not-attempted error if an earlier message of m's key
// failed in this call, or nil.
func (g KeyGate) Blocked(m *outbox.Message) error {
	if cause, ok := g[m.OrderingKey()]; ok {
		return &NotAttemptedError{Cause: cause}
	}
	return nil
}

// Fail records that m failed with err.
func (g KeyGate) Fail(m *outbox.Message, err error) { g[m.OrderingKey()] = err }

// NotAttemptedError reports a message that was not sent because an
// earlier message of its key failed. It matches outbox.ErrNotAttempted.
type NotAttemptedError struct{ Cause error }

func (e *NotAttemptedError) Error() string {
	return "not sent: an earlier message of the same aggregate failed: " + e.Cause.Error()
}

// Is makes errors.Is(err, outbox.ErrNotAttempted) true.
func (e *NotAttemptedError) Is(target error) bool { return target == outbox.ErrNotAttempted }
