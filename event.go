package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// Event is one outbox entry as a producer writes it. AggregateType,
// AggregateID, EventType and Payload are required.
type Event struct {
	// ID is the event's global id. Leave it zero to get a new UUIDv7; set it
	// to make a retried business operation enqueue the same event id.
	ID EventID

	// AggregateType names the kind of entity, e.g. "payment" or "merchant".
	// Sinks route by it: "payment" goes to "payment.events" by default.
	AggregateType string
	// AggregateID identifies the entity, e.g. a transaction number. Events
	// of one (AggregateType, AggregateID) are delivered in order.
	AggregateID string
	// EventType names what happened, e.g. "ApprovalRequested".
	EventType string
	// Payload is the event body. It must be valid JSON; it is delivered
	// byte for byte as given.
	Payload json.RawMessage
	// EncryptionSubject names whose data key seals the payload when the
	// writer encrypts payloads (docs/ENCRYPTION.md): a merchant or a
	// customer, e.g. "customer/981", so that shredding that subject's key
	// makes every payload about it unreadable. Empty means the aggregate,
	// "<AggregateType>/<AggregateID>". It is ignored when encryption is
	// off, and is not stored apart from the sealed payload.
	EncryptionSubject string
	// Headers travel with the event: trace context, a correlation id, or
	// anything else. Keys are HTTP-token characters; values must not
	// contain control characters.
	Headers map[string]string

	// TTL makes the event expire TTL after it is written, measured with the
	// database clock. An expired event is never delivered: it ends EXPIRED.
	TTL time.Duration
	// ExpiresAt is an absolute deadline; use it or TTL, not both.
	ExpiresAt time.Time

	// Delay holds the event back for this long after it is written
	// (database clock).
	Delay time.Duration
	// AvailableAt is an absolute not-before time; use it or Delay, not both.
	AvailableAt time.Time

	// OnExpired, when set, is the compensating event: if this event ends
	// EXPIRED (its deadline passed before it could be delivered), the
	// store enqueues it on the same aggregate in the same transaction as
	// the EXPIRED transition, with the header HeaderCompensates set to this
	// event's id. It needs a deadline (TTL or ExpiresAt).
	OnExpired *Compensation
}

// Compensation is the event to enqueue when an event ends EXPIRED, for
// the business to learn of it (a merchant, a refund flow), e.g.
// {EventType: "ApprovalExpired"}.
type Compensation struct {
	// EventType names the compensating event; required.
	EventType string `json:"event_type"`
	// Payload is its body (valid JSON). When empty, the payload is built
	// from the expired event's fields: {"expired_event_id",
	// "expired_event_type", "aggregate_type", "aggregate_id", "expires_at",
	// "payload": the expired event's payload}.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// HeaderCompensates is the header of a compensating event that names the
// id of the event that expired.
const HeaderCompensates = "outbox-compensates"

// Column sizes of the outbox table. The first two come from the source
// document's DDL (aggregate_id VARCHAR(100), event_type VARCHAR(200)).
const (
	MaxAggregateTypeLen = 100
	MaxAggregateIDLen   = 100
	MaxEventTypeLen     = 200
	// MaxEncryptionSubjectLen bounds Event.EncryptionSubject (the data
	// keys' table holds 256 characters).
	MaxEncryptionSubjectLen = 256
)

// Limits bounds what one event may carry. The zero value means the defaults.
type Limits struct {
	// MaxPayloadBytes is the largest payload accepted. Default 1 MiB.
	MaxPayloadBytes int
	// MaxHeadersBytes bounds the JSON-encoded headers. Default 64 KiB.
	MaxHeadersBytes int
}

// Default limits.
const (
	DefaultMaxPayloadBytes = 1 << 20
	DefaultMaxHeadersBytes = 64 << 10
)

// WithDefaults returns l with zero fields replaced by the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxPayloadBytes == 0 {
		l.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if l.MaxHeadersBytes == 0 {
		l.MaxHeadersBytes = DefaultMaxHeadersBytes
	}
	return l
}

// Validate checks the limits themselves.
func (l Limits) Validate() error {
	if l.MaxPayloadBytes < 0 || l.MaxHeadersBytes < 0 {
		return fmt.Errorf("%w: limits must not be negative (max payload %d, max headers %d)",
			ErrInvalidConfig, l.MaxPayloadBytes, l.MaxHeadersBytes)
	}
	return nil
}

// Validate checks one event against the limits (zero limits mean the
// defaults). The returned error is an [*InvalidEventError] with Index 0.
func (e *Event) Validate(l Limits) error {
	return e.validate(0, l.WithDefaults())
}

func (e *Event) validate(i int, l Limits) error {
	bad := func(field, format string, args ...any) error {
		return &InvalidEventError{Index: i, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	for _, f := range []struct {
		name, value string
		max         int
	}{
		{"aggregate_type", e.AggregateType, MaxAggregateTypeLen},
		{"aggregate_id", e.AggregateID, MaxAggregateIDLen},
		{"event_type", e.EventType, MaxEventTypeLen},
	} {
		if f.value == "" {
			return bad(f.name, "is required")
		}
		if !utf8.ValidString(f.value) {
			return bad(f.name, "is not valid UTF-8")
		}
		if n := utf8.RuneCountInString(f.value); n > f.max {
			return bad(f.name, "is %d characters long; the limit is %d", n, f.max)
		}
		if hasControl(f.value) {
			return bad(f.name, "contains a control character; use printable text")
		}
	}
	if sub := e.EncryptionSubject; sub != "" {
		switch n := utf8.RuneCountInString(sub); {
		case !utf8.ValidString(sub):
			return bad("encryption_subject", "is not valid UTF-8")
		case n > MaxEncryptionSubjectLen:
			return bad("encryption_subject", "is %d characters long; the limit is %d", n, MaxEncryptionSubjectLen)
		case hasControl(sub):
			return bad("encryption_subject", "contains a control character; use printable text")
		}
	}
	if len(e.Payload) == 0 {
		return bad("payload", "is required (use {} for an empty object)")
	}
	if len(e.Payload) > l.MaxPayloadBytes {
		return bad("payload", "is %d bytes; the limit is %d bytes (raise Limits.MaxPayloadBytes or send a reference to the data instead)", len(e.Payload), l.MaxPayloadBytes)
	}
	if !json.Valid(e.Payload) {
		return bad("payload", "is not valid JSON: %s", jsonSyntaxError(e.Payload))
	}
	if problem := payloadTextProblem(e.Payload); problem != "" {
		return bad("payload", "%s", problem)
	}
	size := 2
	for k, v := range e.Headers {
		if !utf8.ValidString(k) {
			return bad("headers", "key %q is not valid UTF-8; header names are ASCII letters, digits and - _ .", k)
		}
		if !isToken(k) {
			return bad("headers", "key %q is not a valid header name (use letters, digits and - _ .)", k)
		}
		if !utf8.ValidString(v) {
			return bad("headers", "value of %q is not valid UTF-8: encode it as UTF-8", k)
		}
		if hasControl(v) {
			return bad("headers", "value of %q contains a control character; use printable text", k)
		}
		size += len(k) + len(v) + 6
	}
	if size > l.MaxHeadersBytes {
		return bad("headers", "are about %d bytes; the limit is %d bytes", size, l.MaxHeadersBytes)
	}
	if e.TTL < 0 {
		return bad("ttl", "is negative (%s)", e.TTL)
	}
	if e.TTL > 0 && !e.ExpiresAt.IsZero() {
		return bad("ttl", "and expires_at are both set; use one")
	}
	if e.Delay < 0 {
		return bad("delay", "is negative (%s)", e.Delay)
	}
	if e.Delay > 0 && !e.AvailableAt.IsZero() {
		return bad("delay", "and available_at are both set; use one")
	}
	if c := e.OnExpired; c != nil {
		if e.TTL == 0 && e.ExpiresAt.IsZero() {
			return bad("on_expired", "needs a deadline: set ttl or expires_at (an event without one never expires)")
		}
		switch n := utf8.RuneCountInString(c.EventType); {
		case c.EventType == "":
			return bad("on_expired", "event_type is required, e.g. \"ApprovalExpired\"")
		case !utf8.ValidString(c.EventType):
			return bad("on_expired", "event_type is not valid UTF-8")
		case n > MaxEventTypeLen:
			return bad("on_expired", "event_type is %d characters long; the limit is %d", n, MaxEventTypeLen)
		case hasControl(c.EventType):
			return bad("on_expired", "event_type contains a control character; use printable text")
		}
		if len(c.Payload) > 0 {
			// The compensating payload has the limit of the event's own.
			if len(c.Payload) > l.MaxPayloadBytes {
				return bad("on_expired", "payload is %d bytes; the limit is %d bytes", len(c.Payload), l.MaxPayloadBytes)
			}
			if !json.Valid(c.Payload) {
				return bad("on_expired", "payload is not valid JSON: %s", jsonSyntaxError(c.Payload))
			}
			if problem := payloadTextProblem(c.Payload); problem != "" {
				return bad("on_expired", "payload %s", problem)
			}
		}
	}
	return nil
}

func jsonSyntaxError(b []byte) string {
	var v any
	err := json.Unmarshal(b, &v)
	if err == nil {
		return "unexpected content"
	}
	return err.Error()
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

// isToken reports whether s is an HTTP header field name (RFC 9110 token).
func isToken(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return true
}
