package lanes

import (
	"cmp"
	"slices"
	"time"

	"github.com/txoutbox/outbox"
)

// Key names an aggregate.
type Key struct{ Type, ID string }

// Part says where a row of a claim's read comes from.
type Part uint8

const (
	// PartFIFO: a due PENDING row read in (available_at, id) order.
	PartFIFO Part = iota
	// PartDeadline: a due PENDING row read in expires_at order (earliest
	// deadline first).
	PartDeadline
	// PartRun: one of the first unfinished rows of an aggregate of the
	// window, in id order (its run).
	PartRun
)

// Row is one row of a claim's read.
type Row struct {
	ID          int64
	Lane        int
	Agg         Key
	Status      outbox.Status
	AvailableAt time.Time
	Part        Part
	// Hold is the PostgreSQL backend's hold column (0 elsewhere): 0 for a
	// row its lane's cursor still reaches, 1 for a row found by its due
	// time, 2 for a BLOCKED or FAILED row.
	Hold int
}

// Plan is what a claim decided from its read.
type Plan struct {
	// Claim lists the rows to claim, in id order.
	Claim []int64
	// Block lists PENDING rows that wait behind a FAILED head: they
	// become BLOCKED.
	Block []int64
	// Defer maps PENDING rows that are due before their aggregate's head
	// (in backoff) to the head's available_at.
	Defer map[int64]time.Time
}

// Empty reports whether the plan changes nothing.
func (p Plan) Empty() bool { return len(p.Claim) == 0 && len(p.Block) == 0 && len(p.Defer) == 0 }

// PlanInput is what the planner decides from.
type PlanInput struct {
	Now time.Time
	// Limit is the batch size; FIFO the part of the window whose
	// aggregates get their heads first (store.ClaimRequest.FIFOSlots).
	Limit, FIFO int
	// FailedBlocks: a FAILED event holds back its aggregate.
	FailedBlocks bool
	// Rows are the read's rows, in any order: the window (PartFIFO,
	// PartDeadline) and the runs (PartRun). A row may come more than once.
	// The runs of an aggregate must be a prefix of its unfinished rows in
	// id order (its first n): the window's rows only name the aggregates
	// that have work, since an aggregate's window rows need not follow
	// each other in its run.
	Rows []Row
	// Claimed holds the rows in flight under a claim that is not the
	// relay's own (PROCESSING for this claim); Own those in flight under
	// the relay's own claims (store.ClaimRequest.Own). A row PROCESSING
	// under no claim of this relay (a lease of the previous schema) is
	// Claimed by its status.
	Claimed, Own map[int64]bool
	// Only, when set, limits the claim to these rows: a run stops at its
	// first claimable row not in Only.
	Only map[int64]bool
}

// aggPlan is one aggregate of the window.
type aggPlan struct {
	key      Key
	firstDue time.Time
	prio     int     // 0: it has a FIFO-share or deadline row in the window
	window   []int64 // its window rows
	run      []Row   // its unfinished rows in id order
}

type candidate struct {
	pos, prio int
	firstDue  time.Time
	id        int64
}

// PlanClaim decides a claim, with the same rules on every backend:
//
//   - The window: the first Limit due PENDING rows in (available_at, id)
//     order that no claim holds, and the deadline rows. The aggregates of
//     the first FIFO of them and of the deadline rows have priority 0,
//     the others 1.
//   - Per aggregate of the window, its run: its unfinished rows in id
//     order. A row is fine to pass if it is the relay's own (in flight
//     under req.Own: the relay sends its batches in order and holds back a
//     later event itself), or PENDING, due, held by no claim and after
//     the aggregate's last own row (a row given back while a later batch
//     of the aggregate is in flight must wait for that batch). The
//     claimable rows are the PENDING ones of the run's prefix of fine
//     rows; pos is their place among them, from 1 (the first is the
//     aggregate's next head, whether or not rows of it are in flight).
//   - When the aggregate's first unfinished row is FAILED (and FAILED
//     blocks), its PENDING rows in the window and the run become BLOCKED;
//     when it is PENDING and in backoff, those due before it take its
//     available_at. So each claim clears its window of what it cannot
//     take, and other aggregates are reached however many events pile up
//     behind one head.
//   - The candidates in (pos, prio, first due, id) order, at most Limit:
//     every aggregate's head comes before any second row.
func PlanClaim(in PlanInput) Plan {
	plan := Plan{Defer: map[int64]time.Time{}}
	held := func(id int64) bool { return in.Claimed[id] || in.Own[id] }

	// The window, deduplicated, and the runs, by aggregate.
	var fifo, deadline []Row
	seen := map[Part]map[int64]bool{PartFIFO: {}, PartDeadline: {}}
	runs := map[Key][]Row{}
	runSeen := map[int64]bool{}
	for _, r := range in.Rows {
		if r.Status == outbox.StatusFailed && !in.FailedBlocks {
			continue
		}
		if r.Part == PartRun {
			if !runSeen[r.ID] {
				runSeen[r.ID] = true
				runs[r.Agg] = append(runs[r.Agg], r)
			}
			continue
		}
		if seen[r.Part][r.ID] || held(r.ID) || r.Status != outbox.StatusPending || r.AvailableAt.After(in.Now) {
			continue
		}
		seen[r.Part][r.ID] = true
		if r.Part == PartFIFO {
			fifo = append(fifo, r)
		} else {
			deadline = append(deadline, r)
		}
	}
	slices.SortFunc(fifo, func(a, b Row) int {
		if c := a.AvailableAt.Compare(b.AvailableAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if len(fifo) > in.Limit {
		fifo = fifo[:in.Limit]
	}
	var aggs []*aggPlan
	byKey := map[Key]*aggPlan{}
	note := func(r Row, prio int) {
		a := byKey[r.Agg]
		if a == nil {
			a = &aggPlan{key: r.Agg, firstDue: r.AvailableAt, prio: prio}
			byKey[r.Agg] = a
			aggs = append(aggs, a)
		}
		if r.AvailableAt.Before(a.firstDue) {
			a.firstDue = r.AvailableAt
		}
		a.prio = min(a.prio, prio)
		if !slices.Contains(a.window, r.ID) {
			a.window = append(a.window, r.ID)
		}
	}
	for i, r := range fifo {
		prio := 1
		if i < in.FIFO {
			prio = 0
		}
		note(r, prio)
	}
	for _, r := range deadline {
		note(r, 0)
	}

	var cands []candidate
	for _, a := range aggs {
		run := runs[a.key]
		slices.SortFunc(run, func(x, y Row) int { return cmp.Compare(x.ID, y.ID) })
		a.run = run
		if len(run) == 0 {
			continue
		}
		var lastMine int64
		for _, r := range run {
			if in.Own[r.ID] {
				lastMine = max(lastMine, r.ID)
			}
		}
		pos := 0
		for _, r := range run {
			mine := in.Own[r.ID]
			ok := !held(r.ID) && r.Status == outbox.StatusPending && !r.AvailableAt.After(in.Now)
			if ok && in.Only != nil && !in.Only[r.ID] {
				break
			}
			if !(mine || (ok && r.ID > lastMine)) {
				break
			}
			if ok {
				pos++
				cands = append(cands, candidate{pos: pos, prio: a.prio, firstDue: a.firstDue, id: r.ID})
			}
		}
		holdBack(&plan, in, a)
	}
	slices.SortFunc(cands, func(x, y candidate) int {
		if c := cmp.Compare(x.pos, y.pos); c != 0 {
			return c
		}
		if c := cmp.Compare(x.prio, y.prio); c != 0 {
			return c
		}
		if c := x.firstDue.Compare(y.firstDue); c != 0 {
			return c
		}
		return cmp.Compare(x.id, y.id)
	})
	if len(cands) > in.Limit {
		cands = cands[:in.Limit]
	}
	for _, c := range cands {
		plan.Claim = append(plan.Claim, c.id)
	}
	slices.Sort(plan.Claim)
	slices.Sort(plan.Block)
	return plan
}

// holdBack adds to plan what aggregate a's head holds back: when its first
// unfinished row is FAILED, its PENDING rows become BLOCKED; when it is
// PENDING in backoff, the PENDING rows due before it take its available_at.
// Rows held by a claim are left alone.
func holdBack(plan *Plan, in PlanInput, a *aggPlan) {
	head := a.run[0]
	if in.Claimed[head.ID] || in.Own[head.ID] {
		return
	}
	failed := head.Status == outbox.StatusFailed
	backoff := head.Status == outbox.StatusPending && head.AvailableAt.After(in.Now)
	if !failed && !backoff {
		return
	}
	rows := map[int64]Row{}
	for _, r := range a.run[1:] {
		rows[r.ID] = r
	}
	for _, r := range in.Rows {
		if r.Agg == a.key && slices.Contains(a.window, r.ID) {
			rows[r.ID] = r
		}
	}
	for id, r := range rows {
		if id == head.ID || in.Claimed[id] || in.Own[id] || r.Status != outbox.StatusPending {
			continue
		}
		if failed {
			plan.Block = append(plan.Block, id)
		} else if r.AvailableAt.Before(head.AvailableAt) {
			plan.Defer[id] = head.AvailableAt
		}
	}
}
