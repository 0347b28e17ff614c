package inbox

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

var (
	// ErrInvalidMessage is matched (errors.Is) by every error about what a
	// message carries: no event id, an id that is too long, a sequence that
	// is not a positive integer. Nothing is recorded for such a message.
	ErrInvalidMessage = errors.New("inbox: invalid message")

	// ErrNoEventID is returned for a message that carries no event id. It
	// matches ErrInvalidMessage too.
	ErrNoEventID = fmt.Errorf("%w: no event id", ErrInvalidMessage)

	// ErrNotMigrated is returned when the inbox tables do not exist. The
	// error names the migration to run.
	ErrNotMigrated = errors.New("inbox: the inbox table does not exist")
)

// Header names the relay's broker sinks put on every message (Kafka
// record headers, NATS and AMQP headers, Redis stream fields). HTTP
// requests carry the same names in their canonical form
// (Outbox-Event-Id, Outbox-Aggregate-Seq, ...), which is what
// [net/http.Header.Get] finds for these.
const (
	HeaderEventID       = "outbox-event-id"
	HeaderAggregateType = "outbox-aggregate-type"
	HeaderAggregateID   = "outbox-aggregate-id"
	// HeaderAggregateSeq is the event's position among the events of its
	// aggregate: 1, 2, 3 ... without gaps at the producer.
	HeaderAggregateSeq = "outbox-aggregate-seq"
)

// Limits on what the inbox stores, in bytes.
const (
	MaxConsumerLen  = 200
	MaxEventIDLen   = 255
	MaxAggregateLen = 255 // aggregate type and aggregate id, each
)

// Message is what the inbox needs of a delivered event. Only EventID is
// required. Seq, when not 0, is checked per (AggregateType, AggregateID):
// see [SequenceIssue].
type Message struct {
	EventID       string
	AggregateType string
	AggregateID   string
	// Seq is the event's aggregate sequence, from 1; 0 means the message
	// carries none and no sequence is checked.
	Seq int64
}

// Validate reports what is wrong with m, as an error matching
// [ErrInvalidMessage] (and [ErrNoEventID] when the id is missing).
func (m Message) Validate() error {
	if m.EventID == "" {
		return fmt.Errorf("%w: the message carries neither an %s header nor any other event id, so it cannot be deduplicated", ErrNoEventID, HeaderEventID)
	}
	if err := checkText("event id", m.EventID, MaxEventIDLen); err != nil {
		return err
	}
	if err := checkText("aggregate type", m.AggregateType, MaxAggregateLen); err != nil {
		return err
	}
	if err := checkText("aggregate id", m.AggregateID, MaxAggregateLen); err != nil {
		return err
	}
	switch {
	case m.Seq < 0:
		return fmt.Errorf("%w: sequence %d is negative: sequences start at 1", ErrInvalidMessage, m.Seq)
	case m.Seq > 0 && (m.AggregateType == "" || m.AggregateID == ""):
		return fmt.Errorf("%w: event %s has sequence %d but no aggregate type and id: a sequence counts the events of one aggregate",
			ErrInvalidMessage, m.EventID, m.Seq)
	}
	return nil
}

// checkText refuses text that the inbox cannot store or compare as it
// came: too long, not UTF-8, or with control characters.
func checkText(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes long, at most %d are allowed", ErrInvalidMessage, what, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidMessage, what, s)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s %q contains a control character", ErrInvalidMessage, what, s)
		}
	}
	return nil
}

func checkConsumer(consumer string) error {
	if consumer == "" {
		return fmt.Errorf("%w: the consumer name is empty: name the consumer (for example \"billing\"), so that two consumers of one event each handle it once", ErrInvalidMessage)
	}
	return checkText("consumer name", consumer, MaxConsumerLen)
}

// FromHeaders builds a Message from a message's headers: get returns a
// header's value ("" when absent) for HeaderEventID, HeaderAggregateType,
// HeaderAggregateID and HeaderAggregateSeq. ids are other places the same
// message may carry its event id (an HTTP Idempotency-Key, a NATS
// Nats-Msg-Id, an AMQP message-id), in order of preference; every
// non-empty one must agree with the outbox-event-id header. The adapters
// (FromRequest, inboxkafka, inboxnats, inboxamqp, inboxredis) call it; it
// is exported for other transports.
//
// The error matches ErrNoEventID when no event id is present, and
// ErrInvalidMessage when the sequence is not a positive integer or the
// ids disagree.
func FromHeaders(get func(name string) string, ids ...string) (Message, error) {
	m := Message{
		EventID:       get(HeaderEventID),
		AggregateType: get(HeaderAggregateType),
		AggregateID:   get(HeaderAggregateID),
	}
	for _, id := range ids {
		switch {
		case id == "":
		case m.EventID == "":
			m.EventID = id
		case id != m.EventID:
			return Message{}, fmt.Errorf("%w: the message carries two different event ids, %q and %q", ErrInvalidMessage, m.EventID, id)
		}
	}
	if s := get(HeaderAggregateSeq); s != "" {
		seq, err := strconv.ParseInt(s, 10, 64)
		if err != nil || seq < 1 {
			return Message{}, fmt.Errorf("%w: %s %q is not a positive integer", ErrInvalidMessage, HeaderAggregateSeq, s)
		}
		m.Seq = seq
	}
	if err := m.Validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}
