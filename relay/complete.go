package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
)

// completeTimeout bounds one attempt to record a batch's outcome.
const completeTimeout = 30 * time.Second

// complete records outcomes. The first write is always attempted, even
// after the lease ended: the database's guard on (status, token) decides,
// and a late delivery still lands in the audit trail.
//
// A failed write is retried while the lease lasts, whatever the failure: a
// lost or killed connection, a database that turned read-only in a
// failover, a full disk. After that the rows belong to the reaper, which
// returns them to PENDING, and they are delivered again (at least once).
// None of these failures is the event's: none ends an event FAILED.
//
// The one exception is a write the database refuses because of the values
// of an event (the store says so with store.ErrRefused: a data exception,
// a program limit). It would fail the same way every time, and the reaper
// would have the batch sent again once per lease, forever: so the relay
// records the batch in smaller groups, finds the events whose outcome
// cannot be stored, and ends each of them FAILED with a reason that says
// why (isolate).
func (r *Relay) complete(ctx context.Context, b *batch, outcomes []store.Outcome) {
	leaseEnd := b.localClaim.Add(r.cfg.Lease)
	req := store.CompleteRequest{
		Token:        b.claim.Token,
		RelayID:      r.cfg.RelayID,
		FailedBlocks: r.failedBlocks(),
		Outcomes:     outcomes,
	}
	res, err := r.recordUntilLeaseEnd(ctx, req, leaseEnd)
	switch {
	case err == nil:
		r.recorded(ctx, b, outcomes, res)
	case errors.Is(err, store.ErrRefused) && r.now().Before(leaseEnd):
		r.log.Warn("the database refused to record a batch's outcome because of the data of some of its events; recording its events in smaller groups to find them",
			"events", len(outcomes), "err", err)
		final, res := r.isolate(ctx, req, err, leaseEnd)
		r.recorded(ctx, b, final, res)
	default:
		r.log.Error("could not record the outcome of a batch before its lease ended; the reaper will return its events to PENDING and they will be delivered again",
			"events", len(outcomes), "err", err)
		r.hooks.leaseLost(len(outcomes)) // observer hook
	}
}

// recordUntilLeaseEnd records req, and retries a write that failed for any
// reason but a refusal of its data (store.ErrRefused), with a growing
// delay, while a try can start before leaseEnd. The first try is always
// made. It returns the last error when it gives up.
func (r *Relay) recordUntilLeaseEnd(ctx context.Context, req store.CompleteRequest, leaseEnd time.Time) (store.CompleteResult, error) {
	delay := 50 * time.Millisecond
	for {
		res, err := r.completeOnce(ctx, req)
		if err == nil {
			return res, nil
		}
		r.stats.completeErrors.Add(1)
		if errors.Is(err, store.ErrRefused) || !r.now().Add(delay).Before(leaseEnd) {
			return res, err
		}
		r.log.Warn("recording batch outcome failed; retrying", "events", len(req.Outcomes), "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		<-t.C
		delay = min(2*delay, 2*time.Second)
	}
}

// completeOnce is one attempt to record req, timed for the observer.
func (r *Relay) completeOnce(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), completeTimeout)
	defer cancel()
	started := r.now() // observer hook
	res, err := r.cfg.Store.Complete(cctx, req)
	r.hooks.completed(started, len(req.Outcomes), err) // observer hook
	return res, err
}

// recorded reports the recorded outcomes to the observer and the counters
// and raises the alarms.
func (r *Relay) recorded(ctx context.Context, b *batch, outcomes []store.Outcome, res store.CompleteResult) {
	r.hooks.recorded(b, outcomes, res, r.now()) // observer hook
	r.afterComplete(ctx, b, outcomes, res)
}

// errLeaseEnded is why isolate left an outcome to the reaper untried.
var errLeaseEnded = errors.New("the lease ended")

// isolate records req's outcomes, whose recording as one batch the
// database refused with firstErr because of their data, in halves, and
// halves of those, in id order, until each group is recorded or is a
// single outcome that the database refuses on its own. Each refused
// outcome is replaced by a FAILED one whose reason says what happened
// (refusedOutcomes). A group whose write fails for another reason (the
// database went away, or turned read-only) is retried until the lease
// ends and is then left to the reaper, as complete does with a whole
// batch: only a refusal of one event's data ends that event FAILED. It
// returns the outcomes as recorded (the ones left to the reaper are not
// among them) and the merged result.
func (r *Relay) isolate(ctx context.Context, req store.CompleteRequest, firstErr error, leaseEnd time.Time) ([]store.Outcome, store.CompleteResult) {
	final := slices.Clone(req.Outcomes)
	stored := make([]bool, len(final))
	var res store.CompleteResult
	record := func(lo, hi int) error {
		sub := req
		sub.Outcomes = final[lo:hi]
		part, err := r.recordUntilLeaseEnd(ctx, sub, leaseEnd)
		if err != nil {
			return err
		}
		res.Applied = append(res.Applied, part.Applied...)
		res.Fenced = append(res.Fenced, part.Fenced...)
		for i := lo; i < hi; i++ {
			stored[i] = true
		}
		return nil
	}
	var refused []int
	refusal := map[int]error{}
	unrecorded := 0
	var lastErr error
	// split handles the group final[lo:hi], whose recording the database
	// just refused with err (store.ErrRefused).
	var split func(lo, hi int, err error)
	split = func(lo, hi int, err error) {
		if hi-lo == 1 {
			refused = append(refused, lo)
			refusal[lo] = err
			return
		}
		mid := (lo + hi) / 2
		for _, g := range [][2]int{{lo, mid}, {mid, hi}} {
			if !r.now().Before(leaseEnd) {
				unrecorded += g[1] - g[0] // the rows belong to the reaper now
				continue
			}
			switch err := record(g[0], g[1]); {
			case err == nil:
			case errors.Is(err, store.ErrRefused):
				split(g[0], g[1], err)
			default:
				unrecorded += g[1] - g[0]
				lastErr = err
			}
		}
	}
	split(0, len(final), firstErr)
	for _, i := range refused {
		orig := final[i]
		var err error
		for _, o := range refusedOutcomes(orig, refusal[i]) {
			if !r.now().Before(leaseEnd) {
				err = errLeaseEnded
				break
			}
			final[i] = o
			if err = record(i, i+1); err == nil || !errors.Is(err, store.ErrRefused) {
				break
			}
		}
		switch {
		case stored[i]:
			r.stats.outcomesRefused.Add(1)
			r.log.Error("the database refused to record an event's outcome because of its data; the event ends FAILED so that it is not sent again in a loop",
				"event_id", orig.EventID.String(), "outcome", string(orig.Kind), "err", refusal[i])
		case err != nil && !errors.Is(err, store.ErrRefused):
			final[i] = orig
			unrecorded++
			lastErr = err
		default:
			final[i] = orig
			r.stats.outcomesRefused.Add(1)
			r.log.Error("the database refused to record an event's outcome, even as FAILED; the reaper will return it to PENDING after its lease",
				"event_id", orig.EventID.String(), "outcome", string(orig.Kind), "err", refusal[i])
		}
	}
	if unrecorded > 0 {
		r.log.Error("could not record the outcome of some of a batch's events before its lease ended; the reaper will return them to PENDING and they will be delivered again",
			"events", unrecorded, "err", lastErr)
		r.hooks.leaseLost(unrecorded) // observer hook
	}
	var out []store.Outcome
	for i, o := range final {
		if stored[i] {
			out = append(out, o)
		}
	}
	return out, res
}

// refusedOutcomes returns the FAILED outcomes that replace orig, whose
// recording the database refused with err, in the order they are tried:
// with a reason that names the original outcome and the database's error,
// with a short reason, and with none (a store may refuse any text).
func refusedOutcomes(orig store.Outcome, err error) []store.Outcome {
	base := store.Outcome{ID: orig.ID, EventID: orig.EventID, Kind: store.Failed, Attempt: orig.Attempt,
		Attempted: true, StartedAt: orig.StartedAt, FinishedAt: orig.FinishedAt}
	long, short, none := base, base, base
	long.Error = fmt.Sprintf("the database refused to record this event's outcome (%s): %s; "+
		"it ends FAILED so that it is not sent again in a loop (the sink's error text, if any, is not kept)",
		orig.Kind, textlimit.StorableText(err.Error(), 300))
	short.Error = "the database refused to record this event's outcome (" + string(orig.Kind) + ")"
	return []store.Outcome{long, short, none}
}

// afterComplete counts the outcomes Complete applied, warns about the
// fenced ones, and logs (and reports to OnFailed) each event that FAILED.
func (r *Relay) afterComplete(ctx context.Context, b *batch, outcomes []store.Outcome, res store.CompleteResult) {
	applied := make(map[int64]bool, len(res.Applied))
	for _, id := range res.Applied {
		applied[id] = true
	}
	if len(res.Fenced) > 0 {
		r.stats.fenced.Add(int64(len(res.Fenced)))
		r.log.Warn("lease lost: another relay or the reaper took these events, so their outcome here was not recorded",
			"events", len(res.Fenced), "first_id", res.Fenced[0])
	}
	for _, o := range outcomes {
		if !applied[o.ID] {
			continue
		}
		switch o.Kind {
		case store.Delivered:
			r.stats.delivered.Add(1)
		case store.Retry:
			r.stats.retried.Add(1)
		case store.Expired:
			r.stats.expired.Add(1)
		case store.Released:
			r.stats.released.Add(1)
		case store.Failed:
			r.stats.failed.Add(1)
			r.deadLettered(ctx, b, o)
		}
	}
}
