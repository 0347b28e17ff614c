package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/txoutbox/outbox/store"
)

// completeTimeout bounds one attempt to record a batch's outcome.
const completeTimeout = 30 * time.Second

// complete records outcomes. The first write is always attempted, even
// after the lease ended: the database's guard on (status, token) decides,
// and a late delivery still lands in the audit trail.
//
// A failed write is retried while the lease lasts; after that the rows
// belong to the reaper (bounded duplicates). A write the database refuses
// because of its data would fail the same way every time, and the reaper
// would have the batch sent again once per lease, forever: so when the
// store says so (store.ErrRefused), or when the write keeps failing for
// half of the lease that was left while the database still answers reads,
// the relay records the batch in smaller groups, finds the events whose
// outcome cannot be stored, and ends each of them FAILED with a reason
// that says why (isolate).
func (r *Relay) complete(ctx context.Context, b *batch, outcomes []store.Outcome) {
	leaseEnd := b.localClaim.Add(r.cfg.Lease)
	isolateAt := r.now().Add(leaseEnd.Sub(r.now()) / 2)
	req := store.CompleteRequest{
		Token:        b.claim.Token,
		RelayID:      r.cfg.RelayID,
		FailedBlocks: r.failedBlocks(),
		Outcomes:     outcomes,
	}
	delay := 50 * time.Millisecond
	for {
		res, err := r.completeOnce(ctx, req)
		if err == nil {
			r.recorded(ctx, b, outcomes, res)
			return
		}
		r.stats.completeErrors.Add(1)
		refused := errors.Is(err, store.ErrRefused)
		if now := r.now(); now.Before(leaseEnd) && (refused || !now.Before(isolateAt)) {
			if refused || r.storeAnswers(ctx, b) {
				r.log.Warn("the database refused to record a batch's outcome; recording its events in smaller groups to find the ones it cannot store",
					"events", len(outcomes), "err", err)
				final, res := r.isolate(ctx, b, req, err, leaseEnd)
				r.recorded(ctx, b, final, res)
				return
			}
		}
		if !r.now().Add(delay).Before(leaseEnd) {
			r.log.Error("could not record the outcome of a batch before its lease ended; the reaper will return its events to PENDING and they will be delivered again",
				"events", len(outcomes), "err", err)
			r.hooks.leaseLost(len(outcomes)) // observer hook
			return
		}
		wait := delay
		if until := isolateAt.Sub(r.now()); until > 0 && until < wait {
			wait = until // look at the database again when isolating is due
		}
		r.log.Warn("recording batch outcome failed; retrying", "events", len(outcomes), "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
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

// storeAnswers reports whether the database answers a read of one of the
// batch's events: if it does while Complete keeps failing, the database is
// up and refuses the write itself.
func (r *Relay) storeAnswers(ctx context.Context, b *batch) bool {
	if len(b.claim.Events) == 0 {
		return false
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := r.cfg.Store.GetEvent(cctx, b.claim.Events[0].EventID)
	return err == nil
}

// isolate records req's outcomes, whose recording as one batch failed with
// firstErr, in halves, and halves of those, in id
// order, until each group is recorded or is a single outcome that the
// database refuses on its own. Each refused outcome is replaced by a
// FAILED one whose reason says what happened (refusedOutcome). It returns
// the outcomes as recorded and the merged result. An outcome that cannot
// be recorded even as FAILED is left to the reaper, with an ERROR log line.
func (r *Relay) isolate(ctx context.Context, b *batch, req store.CompleteRequest, firstErr error, leaseEnd time.Time) ([]store.Outcome, store.CompleteResult) {
	final := slices.Clone(req.Outcomes)
	var res store.CompleteResult
	record := func(outs []store.Outcome) error {
		sub := req
		sub.Outcomes = outs
		part, err := r.completeOnce(ctx, sub)
		if err != nil {
			r.stats.completeErrors.Add(1)
			return err
		}
		res.Applied = append(res.Applied, part.Applied...)
		res.Fenced = append(res.Fenced, part.Fenced...)
		return nil
	}
	var refused []int
	refusal := map[int]error{}
	// split handles the group final[lo:hi], whose recording just failed
	// with err.
	var split func(lo, hi int, err error)
	split = func(lo, hi int, err error) {
		if !r.now().Before(leaseEnd) {
			return // the rows belong to the reaper now
		}
		if hi-lo == 1 {
			if !errors.Is(err, store.ErrRefused) && r.storeAnswers(ctx, b) {
				err = record(final[lo:hi]) // once more, in case it was a passing fault
			}
			if err != nil {
				refused = append(refused, lo)
				refusal[lo] = err
			}
			return
		}
		mid := (lo + hi) / 2
		for _, g := range [][2]int{{lo, mid}, {mid, hi}} {
			if err := record(final[g[0]:g[1]]); err != nil {
				split(g[0], g[1], err)
			}
		}
	}
	split(0, len(final), firstErr)
	for _, i := range refused {
		orig := final[i]
		recordedAs := false
		for _, o := range refusedOutcomes(orig, refusal[i]) {
			if !r.now().Before(leaseEnd) {
				break
			}
			if record([]store.Outcome{o}) == nil {
				final[i] = o
				recordedAs = true
				break
			}
		}
		r.stats.outcomesRefused.Add(1)
		if recordedAs {
			r.log.Error("the database refused to record an event's outcome; the event ends FAILED so that it is not sent again in a loop",
				"event_id", orig.EventID.String(), "outcome", string(orig.Kind), "err", refusal[i])
		} else {
			r.log.Error("the database refused to record an event's outcome, even as FAILED; the reaper will return it to PENDING after its lease",
				"event_id", orig.EventID.String(), "outcome", string(orig.Kind), "err", refusal[i])
		}
	}
	return final, res
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
		orig.Kind, store.StorableText(err.Error(), 300))
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
	}
}
