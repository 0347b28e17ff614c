package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
)

// SealPayloads returns a copy of events whose payloads ring sealed, each
// under its subject's data key (Event.EncryptionSubject, or its
// aggregate), read or made through ks: the producer's transaction, so
// that a key made for the first event of a subject commits with it. The
// caller's events are left as they are. A compensating event with a
// payload of its own is refused: that payload would be stored in plain.
func SealPayloads(ctx context.Context, ring *encrypt.Keyring, ks encrypt.KeyStore, events []outbox.Event) ([]outbox.Event, error) {
	if ring == nil {
		return events, nil
	}
	batch := ring.Batch(ks)
	out := make([]outbox.Event, len(events))
	for i, e := range events {
		if e.OnExpired != nil && len(e.OnExpired.Payload) > 0 {
			return nil, &outbox.InvalidEventError{Index: i, Field: "on_expired",
				Reason: "has a payload of its own, which would be stored unencrypted: with encryption on, leave it empty (the compensating event then carries the expired event's sealed payload)"}
		}
		subject := e.EncryptionSubject
		if subject == "" {
			subject = encrypt.DefaultSubject(e.AggregateType, e.AggregateID)
		}
		if encrypt.IsSealed(e.Payload) {
			return nil, &outbox.InvalidEventError{Index: i, Field: "payload",
				Reason: "is already a sealed envelope (it has the key \"" + encrypt.MarkerKey + "\"): pass the plaintext, the writer seals it"}
		}
		sealed, err := batch.Seal(ctx, e.ID.String(), subject, e.Payload)
		if err != nil {
			var inv *outbox.InvalidEventError
			if errors.As(err, &inv) {
				return nil, err
			}
			return nil, fmt.Errorf("enqueue: seal the payload of event #%d (subject %q): %w", i, subject, err)
		}
		e.Payload = sealed
		out[i] = e
	}
	return out, nil
}
