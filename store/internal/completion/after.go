package completion

import (
	"slices"
	"time"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// Applied is a row the completion changed, as the backend read it back.
type Applied struct {
	ID                         int64
	AggregateType, AggregateID string
	// AvailableAt is the row's new available_at (read only for the rows
	// whose Change.PushesBack).
	AvailableAt time.Time
}

// Head is the first row of an aggregate that a completion failed or
// retried: the aggregate's waiting rows after it are held back.
type Head struct {
	AggregateType, AggregateID string
	ID                         int64
	// AvailableAt (a retried head) is the latest available_at its
	// aggregate's retried rows got: the waiting rows due earlier take it.
	AvailableAt time.Time
}

// Holds are the aggregates whose waiting rows a completion holds back: a
// waiting row is one that is PENDING after the head, not changed by this
// completion and not held by any claim.
type Holds struct {
	// Block: the waiting rows become BLOCKED (a FAILED row blocks its
	// aggregate when the request says FailedBlocks).
	Block []Head
	// Defer: the waiting rows due before Head.AvailableAt take it.
	Defer []Head
}

// Empty reports whether no aggregate is held back.
func (h Holds) Empty() bool { return len(h.Block) == 0 && len(h.Defer) == 0 }

// Holds computes the aggregates held back by the rows applied (in id
// order): per aggregate, its first FAILED row (when FailedBlocks) and its
// first retried row with the latest available_at of its retried rows, in
// the order the aggregates first appear.
func (p *Plan) Holds(applied []Applied) Holds {
	type key struct{ typ, id string }
	var h Holds
	blocks := map[key]bool{}
	defers := map[key]int{}
	for _, a := range applied {
		r := p.Row(a.ID)
		if r == nil {
			continue
		}
		k := key{a.AggregateType, a.AggregateID}
		if r.DeadLetter && p.FailedBlocks && !blocks[k] {
			blocks[k] = true
			h.Block = append(h.Block, Head{AggregateType: k.typ, AggregateID: k.id, ID: a.ID})
		}
		if r.PushesBack {
			i, ok := defers[k]
			if !ok {
				defers[k] = len(h.Defer)
				h.Defer = append(h.Defer, Head{AggregateType: k.typ, AggregateID: k.id, ID: a.ID, AvailableAt: a.AvailableAt})
			} else if a.AvailableAt.After(h.Defer[i].AvailableAt) {
				h.Defer[i].AvailableAt = a.AvailableAt
			}
		}
	}
	return h
}

// Behind decides for a waiting row (id, due at availableAt) of aggregate
// (typ, aggID), read by the backend after the heads: whether it becomes
// BLOCKED, and the available_at it takes (zero: it keeps its own).
func (h Holds) Behind(typ, aggID string, id int64, availableAt time.Time) (block bool, deferTo time.Time) {
	for _, b := range h.Block {
		if b.AggregateType == typ && b.AggregateID == aggID && id > b.ID {
			block = true
		}
	}
	for _, d := range h.Defer {
		if d.AggregateType == typ && d.AggregateID == aggID && id > d.ID && availableAt.Before(d.AvailableAt) {
			deferTo = d.AvailableAt
		}
	}
	return block, deferTo
}

// Attempt is one attempt row a completion writes.
type Attempt struct {
	*store.Outcome
	// Error is the row's error text; HasError false writes NULL.
	Error    string
	HasError bool
	// Replay: a delivery recorded on its row that this completion did not
	// apply. The backend writes nothing for it if the row is PROCESSED
	// with its delivery recorded under the plan's token (the replay of a
	// completion whose commit was ambiguous), and audits it as a lost
	// lease otherwise.
	Replay bool
}

// ReplayCandidates are the rows, each once in id order, of the outcomes
// that are deliveries recorded on the row and were not applied now
// (applied[id] false): a backend that reads the replays before writing
// the attempt rows reads these.
func (p *Plan) ReplayCandidates(applied map[int64]bool) []int64 {
	var ids []int64
	for i := range p.Outcomes {
		if o := &p.Outcomes[i]; backend.DeliveredOnRow(o) && !applied[o.ID] && !slices.Contains(ids, o.ID) {
			ids = append(ids, o.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// Attempts lists the attempt rows of the completion, in the order of the
// outcomes: one per attempted outcome, but none for a delivery recorded on
// its row that was applied (nor for a second such outcome of that row) or
// that replays[id] says was recorded by the completion it replays (nil
// when the backend checks Attempt.Replay in its SQL). The error of a
// fenced outcome says the lease was lost.
func (p *Plan) Attempts(applied, replays map[int64]bool) []Attempt {
	var out []Attempt
	for i := range p.Outcomes {
		o := &p.Outcomes[i]
		if !o.Attempted {
			continue
		}
		onRow := backend.DeliveredOnRow(o)
		if onRow && (replays[o.ID] || applied[o.ID] && p.Row(o.ID).OnRow) {
			continue
		}
		a := Attempt{Outcome: o, Replay: onRow && !applied[o.ID]}
		a.Error, a.HasError = AttemptError(o, applied[o.ID])
		out = append(out, a)
	}
	return out
}

// AttemptError is the error text of outcome o's attempt row: its own text
// (none when empty) when the completion applied it, or one that says the
// lease was lost when its row was fenced.
func AttemptError(o *store.Outcome, applied bool) (text string, ok bool) {
	switch {
	case applied:
		return o.Error, o.Error != ""
	case o.Error != "":
		return o.Error + "; " + backend.LeaseLost, true
	}
	return backend.LeaseLost, true
}
