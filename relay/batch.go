package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// publishShare is the part of the lease a batch may spend publishing; the
// rest is left for recording the outcome before the lease ends.
const publishShare = 0.8

// batch is one claim on its way through publish and mark.
type batch struct {
	relay      *Relay
	claim      *store.Claim
	localClaim time.Time
	index      map[int64]int // row id -> position in claim.Events

	seq             int64 // claim order within the relay, from 1
	recordedAtClaim int64 // sequence of the last batch recorded when this one was claimed
	outcomes        []store.Outcome
	routes          []string // route of each event, filled by route() (observer.go)
	// stopped lists the aggregates this batch left undelivered, so that a
	// later batch in flight holds their events back too.
	stopped map[string]aggregateState
}

// dbTime converts a local time to the database clock, anchored at the claim.
func (b *batch) dbTime(local time.Time) time.Time {
	return b.claim.DBTime.Add(local.Sub(b.localClaim))
}

// localDeadline converts an event's expires_at to the local clock.
func (b *batch) localDeadline(ev *store.Claimed) time.Time {
	if ev.ExpiresAt.IsZero() {
		return time.Time{}
	}
	return b.localClaim.Add(ev.ExpiresAt.Sub(b.claim.DBTime))
}

// aggregateState follows one aggregate through a batch: once an event of
// it is not delivered, the later ones are released with the same delay (or
// held as BLOCKED behind a FAILED one) so that order holds.
type aggregateState struct {
	stopped bool
	retryIn time.Duration
	block   bool
}

// deliver publishes the batch and returns one outcome per claimed event.
// held names aggregates an earlier batch in flight left undelivered: their
// events here are released unsent, behind the earlier ones.
func (b *batch) deliver(ctx context.Context, held map[string]aggregateState) []store.Outcome {
	r := b.relay
	events := b.claim.Events
	b.index = make(map[int64]int, len(events))
	outcomes := make([]store.Outcome, len(events))
	msgs := make([]outbox.Message, 0, len(events))
	msgPos := make([]int, 0, len(events)) // message index -> event index
	heldHere := map[string]aggregateState{}
	now := r.now()
	for i := range events {
		ev := &events[i]
		b.index[ev.ID] = i
		outcomes[i] = store.Outcome{ID: ev.ID, EventID: ev.EventID, Attempt: ev.Attempt}
		deadline := b.localDeadline(ev)
		if ev.Expired || (!deadline.IsZero() && !now.Before(deadline)) {
			outcomes[i].Kind = store.Expired
			outcomes[i].Attempted = true
			outcomes[i].Error = "expired before delivery: deadline was " + ev.ExpiresAt.UTC().Format(time.RFC3339Nano)
			outcomes[i].StartedAt, outcomes[i].FinishedAt = b.dbTime(now), b.dbTime(now)
			outcomes[i].TraceID = store.TraceIDOf(ev.Headers)
			continue
		}
		if st, ok := held[ev.OrderingKey()]; ok {
			outcomes[i].Kind, outcomes[i].RetryIn, outcomes[i].Block = store.Released, st.retryIn, st.block
			heldHere[ev.OrderingKey()] = st
			continue
		}
		m := ev.Message
		m.Deadline = deadline
		msgs = append(msgs, m)
		msgPos = append(msgPos, i)
	}
	// The aggregates whose events this batch gave back unsent stay held
	// for the batches claimed behind it.
	b.stopped = heldHere
	if len(msgs) == 0 {
		return outcomes
	}

	// Publishing gets most of the lease; a stopping relay gives it
	// StopTimeout more and then cancels what is left.
	pctx, cancel := context.WithDeadline(context.WithoutCancel(ctx),
		b.localClaim.Add(time.Duration(float64(r.cfg.Lease)*publishShare)))
	defer cancel()
	stopTimer := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.cfg.StopTimeout, cancel)
		context.AfterFunc(pctx, func() { t.Stop() })
	})
	defer stopTimer()

	started := r.now()
	results := b.publish(pctx, msgs, msgPos) // observer hook: the sink call, traced and timed
	finished := r.now()
	if len(results) != len(msgs) {
		err := fmt.Errorf("sink returned %d results for %d messages (a bug in the sink); treating all as failed", len(results), len(msgs))
		r.log.Error("sink broke its contract", "err", err)
		results = make([]error, len(msgs))
		for i := range results {
			results[i] = err
		}
	}
	aggs := make(map[string]*aggregateState)
	for mi, err := range results {
		i := msgPos[mi]
		ev := &events[i]
		o := &outcomes[i]
		o.StartedAt, o.FinishedAt = b.dbTime(started), b.dbTime(finished)
		// The headers as sent: the tracer gave them the publish span's
		// traceparent; without a tracer, they keep the producer's.
		o.TraceID = store.TraceIDOf(msgs[mi].Headers)
		key := msgs[mi].OrderingKey()
		st := aggs[key]
		if st == nil {
			st = &aggregateState{}
			aggs[key] = st
		}
		b.classify(ev, o, err, st, pctx, msgs[mi].Deadline, finished)
	}
	for key, st := range aggs {
		if st.stopped {
			b.stopped[key] = *st
		}
	}
	return outcomes
}

// classify turns one sink result into an outcome.
func (b *batch) classify(ev *store.Claimed, o *store.Outcome, err error, st *aggregateState,
	pctx context.Context, deadline, finished time.Time) {
	r := b.relay
	if err == nil {
		o.Kind = store.Delivered
		o.Attempted = true
		return
	}
	o.Error = truncate(err.Error(), 1000)
	attempted := !errors.Is(err, outbox.ErrNotAttempted)
	switch {
	case st.stopped:
		// An earlier event of this aggregate was not delivered: this one
		// waits for it, whatever the sink said.
		o.Kind, o.RetryIn, o.Block, o.Attempted = store.Released, st.retryIn, st.block, attempted
	case errors.Is(err, sink.ErrNotEnoughTimeLeft):
		// The route's min_time_left: too late to be worth sending.
		o.Kind, o.Attempted = store.Expired, true
		o.Error = "expired unsent: " + o.Error
	case !deadline.IsZero() && !finished.Before(deadline):
		o.Kind, o.Attempted = store.Expired, true
		o.Error = "expired during delivery: " + o.Error
	case !attempted:
		o.Kind = store.Released
		st.stopped = true
	case pctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// The relay is stopping or the lease budget ran out: not the
		// event's fault, so no retry is counted.
		o.Kind, o.Attempted = store.Released, true
		o.Error = "interrupted (relay stopping or publish exceeded the lease): " + o.Error
		st.stopped = true
	case outbox.IsPermanent(err):
		o.Kind, o.Attempted = store.Failed, true
		o.Error = "permanent error: " + o.Error
		st.stopped, st.block = true, r.failedBlocks()
	default:
		failures := ev.RetryCount + 1
		if r.cfg.NoRetries || failures > r.cfg.MaxRetries {
			o.Kind, o.Attempted = store.Failed, true
			o.Error = fmt.Sprintf("retries exhausted after %d attempts: %s", failures, o.Error)
			st.stopped, st.block = true, r.failedBlocks()
			return
		}
		delay := r.backoff.Delay(failures)
		if ra := outbox.RetryAfter(err); ra > 0 {
			delay = min(ra, 24*time.Hour)
		}
		o.Kind, o.Attempted, o.RetryIn = store.Retry, true, delay
		st.stopped, st.retryIn = true, delay
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
