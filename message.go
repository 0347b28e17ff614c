package outbox

import (
	"encoding/json"
	"time"
)

// Message is an event as a sink receives it from the relay.
type Message struct {
	// ID is the outbox row id: increasing in commit order per aggregate.
	ID            int64
	EventID       EventID
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       json.RawMessage
	Headers       map[string]string
	// AggregateSeq is the event's position among the events of its
	// aggregate, 1, 2, 3 ... without gaps, assigned by the database when
	// the event was written; 0 for an event written before the store
	// numbered events. The relay carries it as the outbox-aggregate-seq
	// header.
	AggregateSeq int64
	// Attempt counts delivery attempts, from 1.
	Attempt   int
	CreatedAt time.Time
	// ExpiresAt is the event's deadline in the database clock; zero if none.
	ExpiresAt time.Time
	// Deadline is ExpiresAt translated to this process's clock: a sink must
	// not start a delivery after it. Zero if the event does not expire.
	Deadline time.Time
}

// OrderingKey is the key under which order is kept: aggregate type and id.
func (m *Message) OrderingKey() string { return m.AggregateType + "\x00" + m.AggregateID }
