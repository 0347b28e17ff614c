package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// publishShare is the part of the lease a batch may spend publishing; the
// rest is left for recording the outcome before the lease ends.
const publishShare = 0.8

// batch is one claim on its way through publish and mark.
type batch struct {
	relay *Relay
	claim *store.Claim
	// localClaim is the local clock just before the claim was sent, and
	// localClaimed just after it returned; the database read its clock
	// (claim.DBTime) in between. Deadlines and the lease count from
	// localClaim, so they end early rather than late; times converted to
	// the database clock count from localClaimed, so that an attempt's
	// recorded times are never later than the database's clock was.
	localClaim, localClaimed time.Time
	index                    map[int64]int // row id -> position in claim.Events

	seq             int64 // claim order within the relay, from 1
	recordedAtClaim int64 // sequence of the last batch recorded when this one was claimed
	outcomes        []store.Outcome
	routes          []string // route of each event, filled by route() (observer.go)
	// stopped lists the aggregates this batch left undelivered, so that a
	// later batch in flight holds their events back too.
	stopped map[string]aggregateState
	// keys opens sealed payloads, reading each data key once per batch
	// (decrypt.go); nil until the first sealed one.
	keys *encrypt.Batch
	// toSeal are the envelopes of the plain payloads admit found, stored
	// in their rows before the batch is sent (decrypt.go).
	toSeal []store.SealedPayload
}

// dbTime converts a local time to the database clock, anchored at the
// claim's return: the result is at least the claim's DBTime and at most
// what the database's clock read at that moment, however long the claim
// took to reach the database or come back.
func (b *batch) dbTime(local time.Time) time.Time {
	return b.claim.DBTime.Add(local.Sub(b.localClaimed))
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
// events here are released unsent, behind the earlier ones. Its steps:
// admit decides which events are sent, send publishes them, and record
// turns the sink's results into outcomes.
func (b *batch) deliver(ctx context.Context, held map[string]aggregateState) []store.Outcome {
	plan := b.admit(ctx, held)
	// The aggregates whose events this batch gave back unsent stay held
	// for the batches claimed behind it.
	b.stopped = plan.heldHere
	b.sealPlain(ctx)
	if len(plan.msgs) == 0 {
		return plan.outcomes
	}
	pctx, cancel, release := b.publishContext(ctx)
	defer release()
	results, started, finished := b.send(ctx, pctx, cancel, plan)
	b.record(plan, results, pctx, started, finished)
	return plan.outcomes
}

// sendPlan is what admit decided for a batch: an outcome per claimed
// event (final for the events not sent), the messages to send and the
// event each came from, and each route's probe among them.
type sendPlan struct {
	outcomes []store.Outcome
	msgs     []outbox.Message
	msgPos   []int          // message index -> event index
	probeAt  map[string]int // route -> message index of its probe
	// heldHere are the aggregates whose events the batch gives back
	// unsent (behind an earlier batch, or waiting for their breaker).
	heldHere map[string]aggregateState
	// receipts are what the destinations answered, as the sink recorded them.
	receipts *receiptLog
}

// admit walks the claimed events in order and decides, for each, whether
// it is sent: an event past its deadline ends EXPIRED, one behind an
// aggregate held by an earlier batch is released unsent, one whose
// route's breaker is open waits for the probe (or ends EXPIRED if its
// deadline comes first), and the rest are sent, a probe first.
func (b *batch) admit(ctx context.Context, held map[string]aggregateState) sendPlan {
	r := b.relay
	events := b.claim.Events
	b.index = make(map[int64]int, len(events))
	plan := sendPlan{
		outcomes: make([]store.Outcome, len(events)),
		msgs:     make([]outbox.Message, 0, len(events)),
		msgPos:   make([]int, 0, len(events)),
		probeAt:  map[string]int{},
		heldHere: map[string]aggregateState{},
		receipts: &receiptLog{},
	}
	outcomes, heldHere, probeAt := plan.outcomes, plan.heldHere, plan.probeAt
	admits := map[string]admission{} // per route, decided once per batch
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
			if since, open := r.breaker.openSince(breakerKey(b.route(i))); open {
				outcomes[i].Error = "expired before delivery: destination unavailable since " + since.UTC().Format(time.RFC3339) +
					" (circuit breaker open); deadline was " + ev.ExpiresAt.UTC().Format(time.RFC3339Nano)
			}
			outcomes[i].StartedAt, outcomes[i].FinishedAt = b.dbTime(now), b.dbTime(now)
			outcomes[i].TraceID = store.TraceIDOf(ev.Headers)
			continue
		}
		if st, ok := held[ev.OrderingKey()]; ok {
			outcomes[i].Kind, outcomes[i].RetryIn, outcomes[i].Block = store.Released, st.retryIn, st.block
			heldHere[ev.OrderingKey()] = st
			continue
		}
		if st, ok := heldHere[ev.OrderingKey()]; ok {
			// An earlier event of the aggregate in this batch waits for
			// its route's breaker: this one waits behind it.
			outcomes[i].Kind, outcomes[i].RetryIn, outcomes[i].Block = store.Released, st.retryIn, st.block
			continue
		}
		route := breakerKey(b.route(i))
		ad, seen := admits[route]
		if !seen {
			ad = r.breaker.admit(ctx, route)
			admits[route] = ad
		}
		_, probing := probeAt[route]
		if ad.kind == admitWait && ad.untilProbe && !deadline.IsZero() && deadline.Before(now.Add(ad.wait)) {
			// Its deadline comes before the route's next probe: nothing
			// of the route is sent until then, so it cannot be in time.
			outcomes[i].Kind, outcomes[i].Attempted = store.Expired, true
			outcomes[i].Error = "expired before delivery: destination unavailable since " + ad.since.UTC().Format(time.RFC3339) +
				" (circuit breaker open); the deadline " + ev.ExpiresAt.UTC().Format(time.RFC3339Nano) +
				" comes before the next probe"
			outcomes[i].StartedAt, outcomes[i].FinishedAt = b.dbTime(now), b.dbTime(now)
			continue
		}
		if ad.kind == admitWait || (ad.kind == admitProbe && probing) {
			// The route's breaker is open (or this batch's probe goes
			// first): give the event back unsent, no retry counted. An
			// event whose deadline comes first is due at its deadline, so
			// that a relay ends it EXPIRED saying why.
			wait := dueBy(ad.wait, deadline, now, r.deadlineLead())
			outcomes[i].Kind, outcomes[i].RetryIn = store.Released, wait
			outcomes[i].Error = "destination unavailable since " + ad.since.UTC().Format(time.RFC3339) + " (circuit breaker open)"
			heldHere[ev.OrderingKey()] = aggregateState{stopped: true, retryIn: wait}
			continue
		}
		payload, err := b.openPayload(ctx, ev)
		if err != nil {
			b.unreadable(ev, &outcomes[i], err, heldHere)
			continue
		}
		if ad.kind == admitProbe {
			probeAt[route] = len(plan.msgs)
		}
		b.sealLater(ctx, ev)
		m := ev.Message
		m.Payload = payload
		m.Deadline = deadline
		m.Headers = withAggregateSeq(m.Headers, m.AggregateSeq)
		plan.msgs = append(plan.msgs, m)
		plan.msgPos = append(plan.msgPos, i)
	}
	return plan
}

// publishContext is the context the batch publishes in: publishing gets
// most of the lease; a stopping relay gives it StopTimeout more and then
// cancels what is left. The cause of the end tells the breaker whether
// the destination is to blame. release frees it once the results are
// recorded (record reads whether it ended).
func (b *batch) publishContext(ctx context.Context) (pctx context.Context, cancel context.CancelCauseFunc, release func()) {
	r := b.relay
	budget, cancelBudget := context.WithDeadlineCause(context.WithoutCancel(ctx),
		b.localClaim.Add(time.Duration(float64(r.cfg.Lease)*publishShare)), errPublishBudget)
	pctx, cancel = context.WithCancelCause(budget)
	stopTimer := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.cfg.StopTimeout, func() { cancel(errRelayStopping) })
		context.AfterFunc(pctx, func() { t.Stop() })
	})
	return pctx, cancel, func() {
		stopTimer()
		cancel(nil)
		cancelBudget()
	}
}

// send publishes the plan's messages in pctx and returns one result per
// message and when the sink call started and finished. The breakers learn
// of each result as the sink reports it, and of the whole batch before
// send returns.
func (b *batch) send(ctx, pctx context.Context, cancel context.CancelCauseFunc, plan sendPlan) (results []error, started, finished time.Time) {
	r := b.relay
	msgs, msgPos := plan.msgs, plan.msgPos
	// The breakers learn of each result as the sink reports it, so that
	// a destination that fails or hangs opens its route at that moment.
	live := newLiveResults(ctx, b, msgs, msgPos, plan.probeAt, pctx, cancel)
	started = r.now()
	sctx := sink.WithReceiptFunc(sink.WithResultFunc(pctx, live.report), plan.receipts.add)
	results = b.publish(sctx, msgs, msgPos) // observer hook: the sink call, traced and timed
	finished = r.now()
	if len(results) != len(msgs) {
		err := fmt.Errorf("sink returned %d results for %d messages (a bug in the sink); treating all as failed", len(results), len(msgs))
		r.log.Error("sink broke its contract", "err", err)
		results = make([]error, len(msgs))
		for i := range results {
			results[i] = err
		}
	}
	// The breakers learn from the results first, so that the events of a
	// route that is now open are given back rather than retried.
	live.batchDone(results)
	return results, started, finished
}

// record turns the sink's results into the outcomes of the sent events
// (classify), per aggregate in order, and keeps held the aggregates it
// left undelivered.
func (b *batch) record(plan sendPlan, results []error, pctx context.Context, started, finished time.Time) {
	r := b.relay
	events := b.claim.Events
	// Every route of the batch that is open now, by this batch or
	// another one (which may have cut this one short).
	down := map[string]*routeDown{}
	for _, i := range plan.msgPos {
		route := breakerKey(b.route(i))
		if _, seen := down[route]; !seen {
			down[route] = r.breaker.down(route)
		}
	}
	aggs := make(map[string]*aggregateState)
	for mi, err := range results {
		i := plan.msgPos[mi]
		ev := &events[i]
		o := &plan.outcomes[i]
		o.StartedAt, o.FinishedAt = b.dbTime(started), b.dbTime(finished)
		// The headers as sent: the tracer gave them the publish span's
		// traceparent; without a tracer, they keep the producer's.
		o.TraceID = store.TraceIDOf(plan.msgs[mi].Headers)
		o.Receipt = plan.receipts.of(ev.EventID)
		key := plan.msgs[mi].OrderingKey()
		st := aggs[key]
		if st == nil {
			st = &aggregateState{}
			aggs[key] = st
		}
		b.classify(ev, o, err, st, pctx, plan.msgs[mi].Deadline, finished, down[breakerKey(b.route(i))])
	}
	for key, st := range aggs {
		if st.stopped {
			b.stopped[key] = *st
		}
	}
}

// classify turns one sink result into an outcome.
// down is set when the event's route has its breaker open: a destination
// fault then gives the event back without a retry counted.
func (b *batch) classify(ev *store.Claimed, o *store.Outcome, err error, st *aggregateState,
	pctx context.Context, deadline, finished time.Time, down *routeDown) {
	r := b.relay
	if err == nil {
		o.Kind = store.Delivered
		o.Attempted = true
		return
	}
	o.Error = textlimit.StorableText(sinkErrorText(err), maxSinkErrorRunes)
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
	case down != nil && !outbox.IsPermanent(err):
		// The route's breaker is open (a fault of this batch, maybe this
		// one, opened it, or cut the batch short): the event waits for
		// the probe, no retry counted.
		wait := dueBy(down.wait, deadline, finished, r.deadlineLead())
		o.Kind, o.Attempted, o.RetryIn = store.Released, attempted, wait
		o.Error = "destination unavailable since " + down.since.UTC().Format(time.RFC3339) + " (circuit breaker open): " + o.Error
		st.stopped, st.retryIn = true, wait
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
		r.retryOrFail(ev, o, err, st)
	}
}

// maxSinkErrorRunes bounds the part of an outcome's error text that comes
// from the sink, so that the relay's own words around it ("retries
// exhausted after 6 attempts: ...") always fit the stored text.
const maxSinkErrorRunes = 1000

// sinkErrorText returns err.Error(), or a description of what went wrong
// if a sink's error value panics in its Error method (a typed nil pointer
// returned as an error, for example): a custom sink's error must never stop
// the relay from recording the outcome.
func sinkErrorText(err error) (text string) {
	text, _ = errorText(err)
	return text
}

func errorText(err error) (text string, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			text = fmt.Sprintf("the sink returned an error of type %T whose Error method panicked: %v", err, p)
			panicked = true
		}
	}()
	return err.Error(), false
}

// safeResults replaces each sink result whose Error method panics by a
// plain error that says so (retryable, as any error without a class), so
// that neither the tracer, the logs nor the outcome trip over it.
func safeResults(results []error) []error {
	for i, err := range results {
		if err == nil {
			continue
		}
		if text, panicked := errorText(err); panicked {
			results[i] = errors.New(text)
		}
	}
	return results
}

// withAggregateSeq returns headers with sink.HeaderAggregateSeq set to
// seq, the number the store gave the event within its aggregate. The
// header is the store's alone: a producer's own header of that name is
// dropped, also when the event has no number (seq 0). headers is copied,
// never changed.
func withAggregateSeq(headers map[string]string, seq int64) map[string]string {
	_, had := headers[sink.HeaderAggregateSeq]
	if seq <= 0 && !had {
		return headers
	}
	out := make(map[string]string, len(headers)+1)
	for k, v := range headers {
		out[k] = v
	}
	delete(out, sink.HeaderAggregateSeq)
	if seq > 0 {
		out[sink.HeaderAggregateSeq] = strconv.FormatInt(seq, 10)
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
