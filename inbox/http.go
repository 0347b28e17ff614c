package inbox

import (
	"fmt"
	"net/http"
)

// HTTP header names, as the relay's HTTP sink sends them (the canonical
// forms of the Header* names, plus the idempotency key).
const (
	HTTPHeaderIdempotencyKey = "Idempotency-Key"
	HTTPHeaderEventID        = "Outbox-Event-Id"
	HTTPHeaderAggregateType  = "Outbox-Aggregate-Type"
	HTTPHeaderAggregateID    = "Outbox-Aggregate-Id"
	HTTPHeaderAggregateSeq   = "Outbox-Aggregate-Seq"
	// HTTPHeaderReplayed is set to "true" on a response the middleware
	// replays rather than produces.
	HTTPHeaderReplayed = "Idempotent-Replayed"
)

// FromRequest takes the Message from an HTTP request: the event id from
// Idempotency-Key or Outbox-Event-Id (both, when present, must agree; the
// relay sends both), the aggregate from Outbox-Aggregate-Type and
// Outbox-Aggregate-Id, and the sequence from Outbox-Aggregate-Seq. A
// request with neither id header gets an error matching ErrNoEventID.
func FromRequest(r *http.Request) (Message, error) {
	key := r.Header.Get(HTTPHeaderIdempotencyKey)
	if key == "" && r.Header.Get(HTTPHeaderEventID) == "" {
		return Message{}, fmt.Errorf("%w: the request has neither an %s nor an %s header", ErrNoEventID, HTTPHeaderIdempotencyKey, HTTPHeaderEventID)
	}
	return FromHeaders(r.Header.Get, key)
}
