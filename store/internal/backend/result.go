package backend

import (
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
)

// NewCompleteResult sorts the ids of outcomes, in their order, into Applied
// (applied[id]) and Fenced (the others).
func NewCompleteResult(outcomes []store.Outcome, applied map[int64]bool) store.CompleteResult {
	var res store.CompleteResult
	for _, o := range outcomes {
		if applied[o.ID] {
			res.Applied = append(res.Applied, o.ID)
		} else {
			res.Fenced = append(res.Fenced, o.ID)
		}
	}
	return res
}

// StorableRequest returns a copy of r whose error texts and relay name are
// storable (textlimit.StorableText), for backends that pass them on as
// they are.
func StorableRequest(r store.CompleteRequest) store.CompleteRequest {
	outs := make([]store.Outcome, len(r.Outcomes))
	for i, o := range r.Outcomes {
		o.Error = textlimit.ErrorText(o.Error)
		outs[i] = o
	}
	r.Outcomes = outs
	r.RelayID = textlimit.StorableText(r.RelayID, textlimit.MaxRelayIDRunes)
	return r
}
