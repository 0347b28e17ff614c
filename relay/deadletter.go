package relay

import (
	"context"
	"fmt"

	"github.com/txoutbox/outbox/store"
)

// deadLettered reports an event whose FAILED outcome the store applied
// (its row is in the dead-letter table): an ERROR log that names it, and
// what an operator runs when its aggregate is blocked behind it, and the
// OnFailed alarm.
func (r *Relay) deadLettered(ctx context.Context, b *batch, o store.Outcome) {
	ev := b.claim.Events[b.index[o.ID]]
	fe := FailedEvent{
		EventID:       o.EventID,
		AggregateType: ev.AggregateType,
		AggregateID:   ev.AggregateID,
		EventType:     ev.EventType,
		Attempts:      o.Attempt,
		Reason:        o.Error,
		Blocking:      r.failedBlocks(),
	}
	attrs := []any{"event_id", fe.EventID.String(), "aggregate_type", fe.AggregateType,
		"aggregate_id", fe.AggregateID, "event_type", fe.EventType, "attempts", fe.Attempts, "reason", fe.Reason}
	if fe.Blocking {
		attrs = append(attrs, "blocked", fmt.Sprintf("later events of %s/%s wait until an operator runs `outbox events retry %s` or `outbox events skip %s`",
			fe.AggregateType, fe.AggregateID, fe.EventID, fe.EventID))
	}
	r.log.Error("event FAILED and moved to the dead-letter table", attrs...)
	if r.cfg.OnFailed != nil {
		r.cfg.OnFailed(ctx, fe)
	}
}
