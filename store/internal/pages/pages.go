// Package pages holds the page loops the store backends share: a sweep's
// steps page after page ([Sweep]), a purge by id pages ([Purge]) and a bulk
// requeue ([Requeue]). Each backend supplies the SQL of one page.
package pages

import (
	"context"
	"errors"
	"fmt"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// SweepStep is one step of a sweep.
type SweepStep int

// The steps of a sweep, in the order Sweep runs them.
const (
	SweepReap    SweepStep = iota // PROCESSING rows whose lease ended -> PENDING
	SweepExpire                   // waiting events past their deadline -> EXPIRED
	SweepBlock                    // PENDING events behind a FAILED one -> BLOCKED (only when FailedBlocks)
	SweepUnblock                  // BLOCKED events no longer held back -> PENDING
)

// String returns the step's short name: "reap", "expire", "block" or
// "unblock".
func (s SweepStep) String() string {
	switch s {
	case SweepReap:
		return "reap"
	case SweepExpire:
		return "expire"
	case SweepBlock:
		return "block"
	case SweepUnblock:
		return "unblock"
	}
	return fmt.Sprintf("SweepStep(%d)", int(s))
}

// Sweep runs the steps of a sweep in order (SweepBlock only when
// req.FailedBlocks), each page after page until a page changes fewer than
// the normalized req.Limit rows, and adds up what they changed. page runs
// one page of a step, usually as one short transaction, and returns how
// many rows it changed. An error ends the sweep: it is returned through wrap
// with the step's operation ("sweep: reap expired leases", ...), together
// with the counts so far.
func Sweep(req store.SweepRequest, wrap func(op string, err error) error, page func(SweepStep) (int64, error)) (store.SweepResult, error) {
	req = req.Normalize()
	var res store.SweepResult
	steps := []struct {
		step    SweepStep
		counter *int64
		op      string
	}{
		{SweepReap, &res.Reaped, "sweep: reap expired leases"},
		{SweepExpire, &res.Expired, "sweep: expire events"},
		{SweepBlock, &res.Blocked, "sweep: block events behind FAILED ones"},
		{SweepUnblock, &res.Unblocked, "sweep: unblock events"},
	}
	for _, st := range steps {
		if st.step == SweepBlock && !req.FailedBlocks {
			continue
		}
		for {
			n, err := page(st.step)
			if err != nil {
				return res, wrap(st.op, err)
			}
			*st.counter += n
			if n < int64(req.Limit) {
				break
			}
		}
	}
	return res, nil
}

// PurgePage is what one page of a purge found and did.
type PurgePage struct {
	// Deleted counts the events the page deleted.
	Deleted int64
	// Last is the page's highest id; 0 when the page was empty.
	Last int64
	// Old counts the page's rows created before the retention cutoff,
	// purgeable or not.
	Old int64
}

// Purge runs a purge page by page in id order and returns how many
// events it deleted. page(after) handles the next page, the rows with id >
// after (0 for the first page). The walk stops at an empty page and at the
// first page whose rows are all younger than the retention, so a purge with
// nothing to do reads one page. An error ends the walk; it is returned as
// it is, with the events deleted so far.
func Purge(page func(after int64) (PurgePage, error)) (int64, error) {
	var total, cursor int64
	for {
		p, err := page(cursor)
		if err != nil {
			return total, err
		}
		total += p.Deleted
		if p.Last == 0 || p.Old == 0 {
			return total, nil
		}
		cursor = p.Last
	}
}

// RequeuePageSize is how many matching events RequeueMatching reads at a
// time; each is then requeued in a transaction of its own.
const RequeuePageSize = 500

// Requeue is RequeueMatching for backends: page returns up to limit
// matching events with an id above after, in id order; each is requeued
// with requeue (the backend's audited Store.Requeue), with a reason that
// names the filter. An event that changed in between (another operator, a
// relay) is skipped. It returns how many events it requeued.
func Requeue(ctx context.Context, f store.RequeueFilter, a store.OperatorAction,
	page func(after int64, limit int) ([]store.MatchedEvent, error), requeue func(context.Context, store.OperatorAction) error) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	reason := "bulk retry (" + f.String() + ")"
	if a.Reason != "" {
		reason = a.Reason + "; " + reason
	}
	var n, after int64
	for {
		rows, err := page(after, RequeuePageSize)
		if err != nil {
			return n, fmt.Errorf("requeue matching: %w", err)
		}
		for _, r := range rows {
			one := a
			one.EventID, one.Reason = r.EventID, reason
			switch err := requeue(ctx, one); {
			case err == nil:
				n++
			case errors.Is(err, outbox.ErrConflict), errors.Is(err, outbox.ErrNotFound):
				// changed or purged since the page was read
			default:
				return n, fmt.Errorf("requeue matching: event %s (%d requeued so far): %w", r.EventID, n, err)
			}
			after = r.ID
		}
		if len(rows) < RequeuePageSize {
			return n, nil
		}
	}
}
