// Package compensation builds the compensating events of expired events
// (an event's on_expired), the same way in every store backend: their
// derived ids, their payload and headers, and the audit note that links
// the two events.
package compensation

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/txoutbox/outbox"
)

// EncodeOnExpired renders an event's OnExpired for the on_expired column:
// nil (SQL NULL) when it has none, else the JSON text
// {"event_type": ..., "payload": ...}.
func EncodeOnExpired(i int, c *outbox.Compensation) (any, error) {
	if c == nil {
		return nil, nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, &outbox.InvalidEventError{Index: i, Field: "on_expired", Reason: err.Error()}
	}
	return string(b), nil
}

// Expired is an event that has just moved to EXPIRED and has an
// on_expired column, as a backend read it in the transaction of that move.
type Expired struct {
	ID            int64
	EventID       outbox.EventID
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       json.RawMessage
	Headers       map[string]string
	ExpiresAt     time.Time
	// Attempt numbers the audit row that links the two (retry_count+1).
	Attempt int
	// OnExpired is the column's JSON text.
	OnExpired []byte
}

// ID returns the id of the compensating event of the event
// expired: derived from it (a UUIDv8 from its SHA-256), so that however
// many times an expiry is retried or replayed, one compensating event can
// exist per expired event (the table's unique event_id).
func ID(expired outbox.EventID) outbox.EventID {
	sum := sha256.Sum256([]byte("outbox-compensates:" + expired.String()))
	var id outbox.EventID
	copy(id[:], sum[:16])
	id[6] = id[6]&0x0f | 0x80 // version 8
	id[8] = id[8]&0x3f | 0x80 // RFC 9562 variant
	return id
}

// Event builds the compensating event of x: same aggregate,
// the event type and payload of its on_expired (or, without a payload,
// one made of x's fields, without x's payload if with it the payload
// would be over maxPayload bytes), the header outbox.HeaderCompensates with x's
// id, and x's trace context, so that the compensation joins its trace.
func Event(x Expired, maxPayload int) (outbox.Event, error) {
	var c outbox.Compensation
	if err := json.Unmarshal(x.OnExpired, &c); err != nil || c.EventType == "" {
		return outbox.Event{}, fmt.Errorf("event %s: on_expired %q is not {\"event_type\": ..., \"payload\": ...}: %v", x.EventID, x.OnExpired, err)
	}
	payload := c.Payload
	if len(payload) == 0 {
		fields := map[string]any{
			"expired_event_id":   x.EventID.String(),
			"expired_event_type": x.EventType,
			"aggregate_type":     x.AggregateType,
			"aggregate_id":       x.AggregateID,
			"payload":            x.Payload,
		}
		if !x.ExpiresAt.IsZero() {
			fields["expires_at"] = x.ExpiresAt.UTC().Format(time.RFC3339Nano)
		}
		b, err := json.Marshal(fields)
		if err == nil && maxPayload > 0 && len(b) > maxPayload {
			delete(fields, "payload")
			fields["payload_omitted"] = "the expired event's payload would make this one too large"
			b, err = json.Marshal(fields)
		}
		if err != nil {
			return outbox.Event{}, fmt.Errorf("event %s: compensating payload: %w", x.EventID, err)
		}
		payload = b
	}
	headers := map[string]string{outbox.HeaderCompensates: x.EventID.String()}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := x.Headers[k]; ok {
			headers[k] = v
		}
	}
	return outbox.Event{
		ID:            ID(x.EventID),
		AggregateType: x.AggregateType,
		AggregateID:   x.AggregateID,
		EventType:     c.EventType,
		Payload:       payload,
		Headers:       headers,
	}, nil
}

// Events builds the compensating events of xs, validated as
// Enqueue validates events, in the order of xs.
func Events(l outbox.Limits, xs []Expired) ([]outbox.Event, error) {
	l = l.WithDefaults()
	events := make([]outbox.Event, 0, len(xs))
	for _, x := range xs {
		e, err := Event(x, l.MaxPayloadBytes)
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	var w capturingWriter
	w.limits = l
	if _, err := outbox.Enqueue(context.Background(), &w, struct{}{}, events...); err != nil {
		return nil, err
	}
	return w.events, nil
}

// capturingWriter is an [outbox.Writer] that keeps the events Enqueue
// validated instead of writing them: Events checks the compensating
// events exactly as Enqueue checks a producer's, and the backend then
// writes them in the expiring transaction.
type capturingWriter struct {
	limits outbox.Limits
	events []outbox.Event
}

func (w *capturingWriter) EnqueueLimits() outbox.Limits { return w.limits }

func (w *capturingWriter) WriteEvents(_ context.Context, _ struct{}, events []outbox.Event) error {
	w.events = events
	return nil
}

// Note is the audit text of the row that links an expired
// event to its compensating event.
func Note(e outbox.Event) string {
	return fmt.Sprintf("compensating event %s (%s) enqueued on the same aggregate", e.ID, e.EventType)
}
