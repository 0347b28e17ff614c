package storetest

import (
	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/compensation"
)

// Refused marks err as a refused outcome (store.ErrRefused) the way the
// backends do, for suites outside store/ (relay/relaytest) that inject a
// refusal; nil stays nil.
func Refused(err error) error { return backend.Refused(err) }

// CompensationID is the event id of the compensating event an expired
// event's on_expired enqueues, as the backends derive it.
func CompensationID(expired outbox.EventID) outbox.EventID { return compensation.ID(expired) }
