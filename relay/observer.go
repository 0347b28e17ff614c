package relay

import (
	"context"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// Observer receives what a relay does, for metrics. The relay calls it from
// its own goroutines, concurrently: implementations must be safe for
// concurrent use, fast, and must not block. Embed [NopObserver] to
// implement only some of the methods. The metrics subpackage implements it
// with Prometheus collectors; the relay itself imports no metrics library.
type Observer interface {
	// ClaimDone follows every claim round trip: how long it took, how
	// many events it returned, and its error.
	ClaimDone(d time.Duration, events int, err error)
	// PublishDone follows every sink call, once per route the call
	// carried: the duration of the whole call and the number of
	// messages for that route.
	PublishDone(route string, d time.Duration, messages int)
	// OutcomeRecorded follows every outcome the store applied (or fenced)
	// after a batch was recorded.
	OutcomeRecorded(o OutcomeInfo)
	// CompleteDone follows every attempt to record a batch's outcomes.
	CompleteDone(d time.Duration, events int, err error)
	// LeaseLost follows a batch whose lease ended before its outcomes
	// could be recorded: either the store fenced some of them (another
	// relay or the reaper took the rows) or recording kept failing until
	// the lease ran out. events counts the events concerned.
	LeaseLost(events int)
	// SweepDone follows every sweep of this relay's sweeper: how long it
	// took and what it changed (leases of other relays that ended, events
	// that expired while waiting).
	SweepDone(d time.Duration, res store.SweepResult, err error)
	// StoreError follows every failed store call; op is one of the Op*
	// constants.
	StoreError(op string, err error)
}

// The operations named by Observer.StoreError.
const (
	OpClaim    = "claim"
	OpComplete = "complete"
	OpSweep    = "sweep"
	OpPurge    = "purge"
	OpCount    = "count" // the drain check
)

// Outcomes lists the outcomes Observer.OutcomeRecorded reports, in the
// vocabulary of the store's Complete requests and audit rows.
var Outcomes = []store.OutcomeKind{store.Delivered, store.Retry, store.Failed, store.Expired, store.Fenced, store.Released}

// OutcomeInfo describes one recorded outcome.
type OutcomeInfo struct {
	// Route is the message's destination (sink.DestinationOf).
	Route   string
	Outcome store.OutcomeKind
	// Lag runs from the event's commit (created_at) to the moment its
	// outcome was recorded. Both ends are on the database clock: the
	// recording time is the claim's database time plus the relay's
	// monotonic time since the claim, so clock skew between hosts does
	// not enter.
	Lag time.Duration
	// HasDeadline is true for events with an expires_at; DeadlineMargin
	// is then expires_at minus the time the sink acknowledged the event
	// (delivered), or minus the time it was found expired (expired: zero
	// or negative).
	HasDeadline    bool
	DeadlineMargin time.Duration
	// Error is the short reason of a retried, failed or expired outcome.
	Error string
}

// NopObserver implements Observer with methods that do nothing.
type NopObserver struct{}

func (NopObserver) ClaimDone(time.Duration, int, error)    {}
func (NopObserver) PublishDone(string, time.Duration, int) {}
func (NopObserver) OutcomeRecorded(OutcomeInfo)            {}
func (NopObserver) CompleteDone(time.Duration, int, error) {}
func (NopObserver) LeaseLost(int)                          {}
func (NopObserver) StoreError(string, error)               {}

func (NopObserver) SweepDone(time.Duration, store.SweepResult, error) {}

// PublishTracer is the tracing seam: it wraps every sink call. The tracing
// subpackage implements it with OpenTelemetry; the relay imports no
// tracing library.
type PublishTracer interface {
	// StartPublish is called just before msgs go to the sink, with the
	// route of each message. It may give a message new headers (a new map:
	// the one given must not be modified), e.g. to carry the publish
	// span's traceparent. The returned function is called with the sink's
	// results, one per message.
	StartPublish(ctx context.Context, msgs []outbox.Message, routes []string) (end func(results []error))
}

// hooks are the calls the claim, publish and record steps make; they feed
// the route-health log and Config.Observer.
type hooks struct {
	r      *Relay
	obs    Observer
	health *routeHealth
}

func newHooks(r *Relay) hooks {
	var obs Observer = NopObserver{}
	if r.cfg.Observer != nil {
		obs = r.cfg.Observer
	}
	return hooks{r: r, obs: obs, health: newRouteHealth(r.log, r.now)}
}

// claimed follows a claim that started at start (local clock).
func (h hooks) claimed(start time.Time, c *store.Claim, err error) {
	n := 0
	if c != nil {
		n = len(c.Events)
	}
	h.obs.ClaimDone(h.r.now().Sub(start), n, err)
	if err != nil {
		h.obs.StoreError(OpClaim, err)
	}
}

// completed follows one attempt to record a batch that started at start.
func (h hooks) completed(start time.Time, events int, err error) {
	h.obs.CompleteDone(h.r.now().Sub(start), events, err)
	if err != nil {
		h.obs.StoreError(OpComplete, err)
	}
}

func (h hooks) storeError(op string, err error) { h.obs.StoreError(op, err) }

func (h hooks) leaseLost(events int) { h.obs.LeaseLost(events) }

// swept follows a sweep that started at start.
func (h hooks) swept(start time.Time, res store.SweepResult, err error) {
	h.obs.SweepDone(h.r.now().Sub(start), res, err)
}

// route returns the route of the batch's i-th event, computed once.
func (b *batch) route(i int) string {
	if b.routes == nil {
		b.routes = make([]string, len(b.claim.Events))
	}
	if b.routes[i] == "" {
		b.routes[i] = sink.DestinationOf(b.relay.cfg.Sink, &b.claim.Events[i].Message)
	}
	return b.routes[i]
}

// publish hands msgs (msgs[k] is the batch's event msgPos[k]) to the sink,
// inside the tracer's span when one is configured, and reports the call's
// duration per route.
func (b *batch) publish(ctx context.Context, msgs []outbox.Message, msgPos []int) []error {
	r := b.relay
	routes := make([]string, len(msgs))
	for k, i := range msgPos {
		routes[k] = b.route(i)
	}
	var end func([]error)
	if r.cfg.Tracer != nil {
		end = r.cfg.Tracer.StartPublish(ctx, msgs, routes)
	}
	start := r.now()
	results := safeResults(r.cfg.Sink.Publish(ctx, msgs))
	d := r.now().Sub(start)
	if end != nil {
		end(results)
	}
	perRoute := make(map[string]int, 1)
	for _, route := range routes {
		perRoute[route]++
	}
	for route, n := range perRoute {
		r.hooks.obs.PublishDone(route, d, n)
	}
	return results
}

// recorded reports the outcomes of a recorded batch: applied ones with
// their kind, fenced ones as fenced. recordedAt is the local time the
// store answered.
func (h hooks) recorded(b *batch, outcomes []store.Outcome, res store.CompleteResult, recordedAt time.Time) {
	fenced := make(map[int64]bool, len(res.Fenced))
	for _, id := range res.Fenced {
		fenced[id] = true
	}
	dbNow := b.dbTime(recordedAt)
	routes := make(map[string]*routeResult, 1)
	for _, o := range outcomes {
		i, ok := b.index[o.ID]
		if !ok {
			continue
		}
		ev := &b.claim.Events[i]
		info := OutcomeInfo{Route: b.route(i), Error: o.Error, Lag: dbNow.Sub(ev.CreatedAt)}
		info.Outcome = o.Kind
		if fenced[o.ID] {
			info.Outcome = store.Fenced
		}
		if !ev.ExpiresAt.IsZero() && (info.Outcome == store.Delivered || info.Outcome == store.Expired) {
			at := o.FinishedAt
			if at.IsZero() {
				at = dbNow
			}
			info.HasDeadline, info.DeadlineMargin = true, ev.ExpiresAt.Sub(at)
		}
		h.obs.OutcomeRecorded(info)
		rr := routes[info.Route]
		if rr == nil {
			rr = &routeResult{}
			routes[info.Route] = rr
		}
		switch info.Outcome {
		case store.Delivered:
			rr.delivered++
		case store.Retry, store.Failed:
			rr.failures++
			rr.lastErr = info.Error
		}
	}
	h.health.batchRecorded(routes)
	if len(res.Fenced) > 0 {
		h.obs.LeaseLost(len(res.Fenced))
	}
}
