// Package completion is the plan of Store.Complete that every backend
// follows: what a request means, what each row of it becomes, which attempt
// rows, dead letters and held-back followers it writes, and the result.
// A backend only runs its SQL for the plan's steps, as the claim's backends
// run theirs for store/internal/lanes:
//
//  1. New checks and normalises the request (nothing to do for an empty
//     one);
//  2. in one transaction, the backend reads the claim's fence and changes
//     the rows it still holds as Row.Change says (Rows, Group, OnRow);
//  3. Holds names the aggregates whose waiting rows a FAILED row blocks or
//     a retried row pushes back, and Behind decides for each such row;
//  4. Attempts lists the attempt rows (a fenced outcome is audited as a
//     lost lease; a delivery recorded on its row writes none, nor does its
//     replay), ReplayCandidates the rows whose replay the backend checks;
//  5. Expired lists the rows whose compensating events are enqueued in the
//     same transaction, ClaimLeft the claim's ids left after it;
//  6. Result sorts the request's ids into applied and fenced.
package completion

import (
	"fmt"
	"slices"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// DeadLetterReason is the reason of a dead letter whose outcome carries no
// error text.
const DeadLetterReason = "failed"

// Plan is one completion request, checked and normalised.
type Plan struct {
	Token string
	// RelayID is the relay's name as requested (the claimer's key);
	// StoredRelayID the same bounded for the columns that store it.
	RelayID, StoredRelayID string
	FailedBlocks           bool
	// Outcomes are the request's outcomes in their order, duplicates
	// included, with storable error texts (textlimit.ErrorText).
	Outcomes []store.Outcome
	// Rows has one entry per row of the request, for its first outcome
	// (the one a completion applies), in id order.
	Rows []Row

	index map[int64]int // id -> index in Rows
}

// Row is one row of a completion: its first outcome and what it becomes.
type Row struct {
	*store.Outcome
	Change
}

// Change is what a row becomes when its claim still holds it.
type Change struct {
	// Status is the row's new status.
	Status outbox.Status
	// CountsRetry: retry_count + 1.
	CountsRetry bool
	// Finishes: processed_at = now; otherwise processed_at = NULL.
	Finishes bool
	// Reschedules: available_at = now + AvailableIn (RetryIn, never negative);
	// otherwise available_at is kept.
	Reschedules bool
	AvailableIn time.Duration
	// SetsError: last_error = Error (which may be empty); otherwise
	// last_error is kept.
	SetsError bool
	// OnRow: the delivery is recorded on the row (delivered_* columns),
	// backend.DeliveredOnRow, and writes no attempt row.
	OnRow bool
	// DeadLetter: a dead letter is written, with DeadLetterReason when
	// the outcome has no error text.
	DeadLetter bool
	Reason     string
	// PushesBack: the waiting rows of the row's aggregate behind it take
	// its new available_at if it is later than theirs (a retry keeps the
	// aggregate's order).
	PushesBack bool
}

// ChangeOf is what outcome o makes of its row.
func ChangeOf(o *store.Outcome) (Change, error) {
	var c Change
	switch o.Kind {
	case store.Delivered:
		c = Change{Status: outbox.StatusProcessed, Finishes: true, OnRow: backend.DeliveredOnRow(o)}
	case store.Failed:
		c = Change{Status: outbox.StatusFailed, CountsRetry: true, Finishes: true, SetsError: true, DeadLetter: true,
			Reason: o.Error}
		if c.Reason == "" {
			c.Reason = DeadLetterReason
		}
	case store.Expired:
		c = Change{Status: outbox.StatusExpired, Finishes: true, SetsError: true}
	case store.Retry:
		c = Change{Status: outbox.StatusPending, CountsRetry: true, Reschedules: true, AvailableIn: max(o.RetryIn, 0),
			SetsError: true, PushesBack: true}
	case store.Released:
		c = Change{Status: outbox.StatusPending, Reschedules: true, AvailableIn: max(o.RetryIn, 0)}
		if o.Block {
			c.Status = outbox.StatusBlocked
		}
	default:
		return c, fmt.Errorf("complete: unknown outcome kind %q for event %d", o.Kind, o.ID)
	}
	return c, nil
}

// New checks and normalises req: every kind known, error texts and the
// relay's name bounded. A request without outcomes makes an empty plan,
// which a backend completes without a transaction.
func New(req store.CompleteRequest) (*Plan, error) {
	p := &Plan{
		Token:         req.Token,
		RelayID:       req.RelayID,
		StoredRelayID: textlimit.StorableText(req.RelayID, textlimit.MaxRelayIDRunes),
		FailedBlocks:  req.FailedBlocks,
		Outcomes:      make([]store.Outcome, len(req.Outcomes)),
		index:         make(map[int64]int, len(req.Outcomes)),
	}
	for i, o := range req.Outcomes {
		o.Error = textlimit.ErrorText(o.Error)
		p.Outcomes[i] = o
	}
	for i := range p.Outcomes {
		o := &p.Outcomes[i]
		c, err := ChangeOf(o)
		if err != nil {
			return nil, err
		}
		if _, dup := p.index[o.ID]; dup {
			continue
		}
		p.index[o.ID] = len(p.Rows)
		p.Rows = append(p.Rows, Row{Outcome: o, Change: c})
	}
	slices.SortFunc(p.Rows, func(a, b Row) int { return cmpID(a.ID, b.ID) })
	for i, r := range p.Rows {
		p.index[r.ID] = i
	}
	return p, nil
}

func cmpID(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Empty reports whether the request has no outcome.
func (p *Plan) Empty() bool { return len(p.Outcomes) == 0 }

// Row returns the row id of the plan, nil for an id not in it.
func (p *Plan) Row(id int64) *Row {
	i, ok := p.index[id]
	if !ok {
		return nil
	}
	return &p.Rows[i]
}

// IDs are the plan's rows, each once, in id order.
func (p *Plan) IDs() []int64 {
	ids := make([]int64, len(p.Rows))
	for i, r := range p.Rows {
		ids[i] = r.ID
	}
	return ids
}

// OutcomeIDs are the ids of the outcomes, in their order, duplicates
// included (what the claimer is told was completed).
func (p *Plan) OutcomeIDs() []int64 {
	ids := make([]int64, len(p.Outcomes))
	for i, o := range p.Outcomes {
		ids[i] = o.ID
	}
	return ids
}

// AllDelivered reports whether every outcome is DELIVERED, each row once:
// a batch a backend may complete by a shorter way.
func (p *Plan) AllDelivered() bool {
	if len(p.Outcomes) != len(p.Rows) {
		return false
	}
	for i := range p.Outcomes {
		if p.Outcomes[i].Kind != store.Delivered {
			return false
		}
	}
	return true
}

// DeliveredAlike reports whether every outcome is a delivery recorded on
// its row without a trace id, all with one start and one finish time: a
// batch whose rows differ only by their ids, event ids, attempt numbers
// and receipts.
func (p *Plan) DeliveredAlike() bool {
	outs := p.Outcomes
	for i := range outs {
		o := &outs[i]
		if !backend.DeliveredOnRow(o) || o.TraceID != "" ||
			!o.StartedAt.Equal(outs[0].StartedAt) || !o.FinishedAt.Equal(outs[0].FinishedAt) {
			return false
		}
	}
	return true
}

// HasExpired reports whether some outcome is EXPIRED: its row may have a
// compensating event to enqueue.
func (p *Plan) HasExpired() bool {
	for i := range p.Outcomes {
		if p.Outcomes[i].Kind == store.Expired {
			return true
		}
	}
	return false
}

// OnRow returns the rows among ids (all of the plan's rows when ids is nil)
// whose delivery is recorded on the row, in the order of ids.
func (p *Plan) OnRow(ids []int64) []*Row {
	var out []*Row
	each := func(r *Row) {
		if r != nil && r.OnRow {
			out = append(out, r)
		}
	}
	if ids == nil {
		for i := range p.Rows {
			each(&p.Rows[i])
		}
		return out
	}
	for _, id := range ids {
		each(p.Row(id))
	}
	return out
}

// Group sorts ids (rows of the plan, as applied) by the kind of their
// outcome: the kinds in the order they first appear in ids, and the ids of
// each kind in the order of ids.
func (p *Plan) Group(ids []int64) (kinds []store.OutcomeKind, byKind map[store.OutcomeKind][]int64) {
	byKind = map[store.OutcomeKind][]int64{}
	for _, id := range ids {
		r := p.Row(id)
		if r == nil {
			continue
		}
		if _, seen := byKind[r.Kind]; !seen {
			kinds = append(kinds, r.Kind)
		}
		byKind[r.Kind] = append(byKind[r.Kind], id)
	}
	return kinds, byKind
}

// Expired lists the rows of applied (in its order) that the completion
// moved to EXPIRED: their compensating events, if any, are enqueued in
// the same transaction.
func (p *Plan) Expired(applied []int64) []int64 {
	var out []int64
	for _, id := range applied {
		if r := p.Row(id); r != nil && r.Status == outbox.StatusExpired {
			out = append(out, id)
		}
	}
	return out
}

// DeadLetters lists the rows of applied (in its order) that get a dead
// letter.
func (p *Plan) DeadLetters(applied []int64) []*Row {
	var out []*Row
	for _, id := range applied {
		if r := p.Row(id); r != nil && r.DeadLetter {
			out = append(out, r)
		}
	}
	return out
}

// ClaimLeft is what is left of the claim's ids once this completion's rows
// leave it, and whether that differs from claimIDs. With none left the
// claim's row goes.
func (p *Plan) ClaimLeft(claimIDs []int64) (left []int64, changed bool) {
	left = slices.DeleteFunc(slices.Clone(claimIDs), func(id int64) bool { _, ok := p.index[id]; return ok })
	return left, len(left) != len(claimIDs)
}

// Result sorts the ids of the outcomes, in their order (duplicates
// included), into Applied (applied[id]) and Fenced (the others: their
// claim no longer held them, nothing changed).
func (p *Plan) Result(applied map[int64]bool) store.CompleteResult {
	var res store.CompleteResult
	for _, o := range p.Outcomes {
		if applied[o.ID] {
			res.Applied = append(res.Applied, o.ID)
		} else {
			res.Fenced = append(res.Fenced, o.ID)
		}
	}
	return res
}
