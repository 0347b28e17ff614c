package outbox

import (
	"database/sql/driver"
	"fmt"

	"github.com/google/uuid"
)

// EventID is the globally unique identifier of an event: a UUIDv7, so ids
// sort roughly by creation time. It is the deduplication key everywhere: the
// HTTP Idempotency-Key, Kafka and AMQP headers, JetStream's Nats-Msg-Id.
type EventID [16]byte

// NewEventID returns a new UUIDv7.
func NewEventID() EventID {
	u, err := uuid.NewV7()
	if err != nil {
		// uuid.NewV7 fails only when the system random source fails.
		u = uuid.New()
	}
	return EventID(u)
}

// ParseEventID parses the canonical 36-character form.
func ParseEventID(s string) (EventID, error) {
	u, err := uuid.Parse(s)
	if err != nil {
		return EventID{}, fmt.Errorf("invalid event id %q: want a UUID such as 0190b6c8-8a2e-7c3e-9f1a-2b3c4d5e6f70", s)
	}
	return EventID(u), nil
}

// IsZero reports whether id is the zero value (no id assigned).
func (id EventID) IsZero() bool { return id == EventID{} }

// String returns the canonical lower-case form.
func (id EventID) String() string { return uuid.UUID(id).String() }

// MarshalText implements encoding.TextMarshaler.
func (id EventID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *EventID) UnmarshalText(b []byte) error {
	v, err := ParseEventID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// Value implements driver.Valuer: event ids are stored as their text form,
// which every backend accepts (PostgreSQL casts it to uuid).
func (id EventID) Value() (driver.Value, error) { return id.String(), nil }

// Scan implements sql.Scanner from text or 16 raw bytes.
func (id *EventID) Scan(src any) error {
	switch v := src.(type) {
	case string:
		return id.UnmarshalText([]byte(v))
	case []byte:
		if len(v) == 16 {
			copy(id[:], v)
			return nil
		}
		return id.UnmarshalText(v)
	case [16]byte:
		*id = EventID(v)
		return nil
	default:
		return fmt.Errorf("outbox: cannot scan %T into EventID", src)
	}
}
