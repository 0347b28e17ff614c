package relay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// BreakerConfig configures the circuit breaker each route (the sink plus
// the destination routing computes: a topic, subject, stream or URL) gets.
// Its state lives in the database (store.Store's Routes and
// ChangeRoute), so every relay on the outbox sees the same one. Zero values mean the documented defaults.
//
// Faults are counted in time, as each attempt's result arrives (a request
// that exceeds its timeout counts at that moment, not when its batch
// ends), over every batch of the relay. A breaker opens when either:
//
//   - within Window, at least MinAttempts deliveries to the route were
//     attempted and at least FailureRatio of them met a destination
//     fault (the rate rule), or
//   - for FailingFor, no attempt to the route succeeded while at least
//     3 met a destination fault (the silence rule: it catches an outage
//     with little traffic, a lone event retrying, and a destination that
//     hangs), or
//   - in one batch, or in several in a row, every attempt to the route
//     met a destination fault, 6 attempts at least (the failed-batches
//     rule: an outage opens it when the first batch that meets it ends,
//     if that batch sent the route 6 events, and a route with 3 aggregates
//     at its second batch, so that no event is retried twice; a lone
//     event at its 6th attempt).
//
// Attempts sent together are not "in a row": a batch counts as failed
// only when all its attempts to the route failed, so a gateway that
// refuses one request in five at random opens it only when 6 attempts
// with no success between them fail (about once in 15,000), however many
// requests a batch sends at once. Destination faults are the retryable errors
// (connection refused, DNS, TLS, timeouts, 5xx, 429, a broker that is
// unavailable, and a request still unanswered when the relay's publish
// budget runs out); event faults (other 4xx, an oversized message, an
// invalid destination: outbox.Permanent) never open it. While it is open,
// the route's events are not sent: they return to PENDING without a retry
// counted, due again when a probe may go (OpenMin after opening; after a
// failed probe, as long as the outage has lasted, between OpenMin and
// OpenMax). Then exactly one relay sends one probe, the route's oldest due
// event it claimed: if it is delivered the breaker closes.
type BreakerConfig struct {
	// Disabled turns the breaker off: every fault is a retry.
	Disabled bool
	// Window is the time over which the fault rate is measured. Default 30s.
	Window time.Duration
	// MinAttempts is the least number of attempts in Window before the
	// rate counts. Default 20: with fewer, a gateway that fails one
	// request in five at random would reach half of them too often.
	MinAttempts int
	// FailureRatio is the share of faulty attempts in Window that opens
	// the breaker. Default 0.5.
	FailureRatio float64
	// FailingFor opens the breaker when no attempt succeeded for this
	// long while at least 3 met a destination fault (more on a route whose
	// attempts in Window up to FailingFor before the run already met faults: as many as faults
	// at that rate string together less than once in 10,000 runs, 6 at
	// one in five, at most 14). Default 2s. With
	// MaxRetries below 5, keep it shorter than the backoff an event spends
	// before MaxRetries is reached, or a lone event meeting an outage can
	// end FAILED before the breaker opens (the relay warns at start when
	// it is not); with 5 or more, its 6th failed attempt opens the breaker
	// anyway.
	FailingFor time.Duration
	// OpenMin is the wait between opening and the first probe, OpenMax
	// the longest wait between two probes. Defaults 5s and 30s.
	OpenMin, OpenMax time.Duration
	// Refresh is how often a relay reads the shared state of the breakers
	// (one small query), and how soon an event held back behind another
	// relay's probe is looked at again. Default 1s.
	Refresh time.Duration
}

// Breaker defaults.
const (
	DefaultBreakerWindow       = 30 * time.Second
	DefaultBreakerMinAttempts  = 20
	DefaultBreakerFailureRatio = 0.5
	DefaultBreakerFailingFor   = 2 * time.Second
	DefaultBreakerOpenMin      = 5 * time.Second
	DefaultBreakerOpenMax      = 30 * time.Second
	DefaultBreakerRefresh      = time.Second
)

func (c BreakerConfig) withDefaults() BreakerConfig {
	if c.Window == 0 {
		c.Window = DefaultBreakerWindow
	}
	if c.MinAttempts == 0 {
		c.MinAttempts = DefaultBreakerMinAttempts
	}
	if c.FailureRatio == 0 {
		c.FailureRatio = DefaultBreakerFailureRatio
	}
	if c.FailingFor == 0 {
		c.FailingFor = DefaultBreakerFailingFor
	}
	if c.OpenMin == 0 {
		c.OpenMin = DefaultBreakerOpenMin
	}
	if c.OpenMax == 0 {
		c.OpenMax = max(DefaultBreakerOpenMax, c.OpenMin)
	}
	if c.Refresh == 0 {
		c.Refresh = DefaultBreakerRefresh
	}
	return c
}

func (c BreakerConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: breaker: "+format, append([]any{outbox.ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Disabled:
		return nil
	case c.Window < time.Second:
		return bad("window %s is too short: use at least 1s (the default is %s)", c.Window, DefaultBreakerWindow)
	case c.MinAttempts < 1:
		return bad("min attempts %d must be at least 1", c.MinAttempts)
	case c.FailureRatio <= 0 || c.FailureRatio > 1:
		return bad("failure ratio %g is out of range: use more than 0 and at most 1 (e.g. 0.5)", c.FailureRatio)
	case c.FailingFor < 100*time.Millisecond || c.FailingFor > time.Hour:
		return bad("failing-for %s is out of range: use 100ms to 1h (the default is %s)", c.FailingFor, DefaultBreakerFailingFor)
	case c.OpenMin < 100*time.Millisecond:
		return bad("open-min %s is too short: use at least 100ms", c.OpenMin)
	case c.OpenMax < c.OpenMin:
		return bad("open-max %s is shorter than open-min %s", c.OpenMax, c.OpenMin)
	case c.Refresh < 10*time.Millisecond || c.Refresh > time.Minute:
		return bad("refresh %s is out of range: use 10ms to 1m", c.Refresh)
	}
	return nil
}

// BreakerObserver is implemented by observers (Config.Observer) that
// follow the state of the routes' breakers, such as the metrics package's
// outbox_circuit_state gauge. The relay reports every route it reads from
// the database, on each refresh, when its state changed.
type BreakerObserver interface {
	BreakerState(route string, state store.BreakerState)
}

// routeStore is what the breaker needs of the store: the shared state of
// the routes (see [store.Store]).
type routeStore interface {
	Routes(ctx context.Context) (store.RouteSnapshot, error)
	ChangeRoute(ctx context.Context, c store.RouteChange) (bool, error)
}

// breaker is one relay's view of the shared breakers, and its own count of
// recent faults per route.
type breaker struct {
	r   *Relay
	cfg BreakerConfig
	rs  routeStore

	mu       sync.Mutex
	shared   map[string]store.Route
	dbAt     time.Time // database clock at the last read
	localAt  time.Time // local clock at the last read
	windows  map[string]*faultWindow
	reported map[string]store.BreakerState
}

// newBreaker returns nil (no breaker) when it is disabled.
func newBreaker(r *Relay) *breaker {
	if r.cfg.Breaker.Disabled {
		return nil
	}
	// A lone event meeting an outage opens the breaker by the silence rule
	// when its retries last FailingFor, or by the failed-batches rule when
	// it has failedBatchesFaults attempts; it can end FAILED only if neither.
	if spent, ok := r.retryTime(); ok && spent < r.cfg.Breaker.FailingFor && r.cfg.MaxRetries+1 < failedBatchesFaults {
		r.log.Warn("a lone event meeting an outage can end FAILED before the circuit breaker opens: its retries take as little as "+
			spent.String()+", less than the breaker's failing-for, and its "+fmt.Sprint(r.cfg.MaxRetries+1)+
			" attempts are fewer than the "+fmt.Sprint(failedBatchesFaults)+" failed in a row that open it; raise the backoff or max retries, or lower failing-for",
			"failing_for", r.cfg.Breaker.FailingFor, "max_retries", r.cfg.MaxRetries, "backoff_min", r.cfg.BackoffMin)
	}
	return &breaker{r: r, cfg: r.cfg.Breaker, rs: r.cfg.Store, shared: map[string]store.Route{},
		windows: map[string]*faultWindow{}, reported: map[string]store.BreakerState{}}
}

// retryTime is the least time an event takes from its first failed
// attempt to its last one (with the shortest jitter), and whether it
// fails often enough for the silence rule (FailingFor) to apply at all.
func (r *Relay) retryTime() (time.Duration, bool) {
	if r.cfg.NoRetries || r.cfg.MaxRetries+1 < failingForFaults {
		return 0, false
	}
	var d time.Duration
	for n := 1; n <= r.cfg.MaxRetries; n++ {
		d += r.backoff.Base(n) / 2
	}
	return d, true
}

// breakerCallTimeout bounds one read or change of the shared state.
const breakerCallTimeout = 10 * time.Second

// refreshLoop reads the shared state every Refresh until ctx ends.
func (b *breaker) refreshLoop(ctx context.Context) {
	t := time.NewTicker(b.cfg.Refresh)
	defer t.Stop()
	for {
		b.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh reads the shared state; a failed read keeps the last one.
func (b *breaker) refresh(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), breakerCallTimeout)
	defer cancel()
	local := b.r.now()
	snap, err := b.rs.Routes(cctx)
	if err != nil {
		if ctx.Err() == nil {
			b.r.log.Warn("could not read the circuit breakers' state; using the last one read", "err", err)
		}
		return
	}
	obs, _ := b.r.hooks.obs.(BreakerObserver)
	var changed []store.Route
	b.mu.Lock()
	b.dbAt, b.localAt = snap.DBTime, local
	for _, rt := range snap.Routes {
		if cur, ok := b.shared[rt.Name]; ok && cur.Version > rt.Version {
			// A read that began before this relay's own change (the
			// refresh after it) ended after it: keep the newer row, or
			// the relay would forget the probe it holds.
			continue
		}
		b.shared[rt.Name] = rt
		if b.reported[rt.Name] != rt.State {
			b.reported[rt.Name] = rt.State
			changed = append(changed, rt)
		}
	}
	b.mu.Unlock()
	if obs != nil {
		for _, rt := range changed {
			obs.BreakerState(rt.Name, rt.State)
		}
	}
}

// dbNow is the database clock, from the last read and the local
// monotonic clock since. Call with mu held.
func (b *breaker) dbNow() time.Time {
	if b.dbAt.IsZero() {
		return time.Time{}
	}
	return b.dbAt.Add(b.r.now().Sub(b.localAt))
}

// admitKind is what a batch does with a route's events.
type admitKind int

const (
	admitSend  admitKind = iota // closed: send
	admitWait                   // open: release unsent until wait ends
	admitProbe                  // this relay holds the probe: send the first event only
)

type admission struct {
	kind  admitKind
	wait  time.Duration // admitWait, and the events behind the probe
	since time.Time     // start of the outage (database clock)
	// untilProbe: the wait ends at the route's next probe (OPEN, not by
	// hand), so no event of the route can be sent before it.
	untilProbe bool
}

// admit decides, once per batch and route, what the batch does with the
// route's events. Taking the probe is a compare-and-set on the route's row.
func (b *breaker) admit(ctx context.Context, route string) admission {
	if b == nil {
		return admission{kind: admitSend}
	}
	b.mu.Lock()
	rt, ok := b.shared[route]
	now := b.dbNow()
	b.mu.Unlock()
	if !ok || rt.State == store.BreakerClosed {
		return admission{kind: admitSend}
	}
	if w, waiting := b.waitOf(rt, now); waiting {
		return admission{kind: admitWait, since: rt.OpenedAt, wait: w,
			untilProbe: rt.State == store.BreakerOpen && !rt.Forced}
	}
	wait := admission{kind: admitWait, since: rt.OpenedAt, wait: b.cfg.Refresh}
	reason := "probe: the wait after opening ended"
	if rt.State == store.BreakerHalfOpen {
		reason = fmt.Sprintf("probe: taking over the probe of %s, whose lease ended", rt.ProbeBy)
	}
	if !b.change(ctx, rt, store.RouteChange{To: store.BreakerHalfOpen, ProbeIn: b.r.cfg.Lease,
		ProbeBy: b.r.cfg.RelayID, Opens: rt.Opens, Reason: reason, LastError: rt.LastError}) {
		return wait
	}
	b.r.log.Warn("circuit breaker half-open: sending one probe to the route", "route", route,
		"open_since", rt.OpenedAt, "opens", rt.Opens)
	return admission{kind: admitProbe, since: rt.OpenedAt, wait: b.cfg.Refresh}
}

// waitOf says whether the events of rt must wait (and how long) rather
// than probe, at database time now.
func (b *breaker) waitOf(rt store.Route, now time.Time) (time.Duration, bool) {
	switch {
	case rt.State == store.BreakerClosed:
		return 0, false
	case rt.State == store.BreakerOpen && rt.Forced:
		return b.cfg.OpenMax, true
	case rt.State == store.BreakerOpen && now.Before(rt.ProbeAt):
		return max(rt.ProbeAt.Sub(now), 10*time.Millisecond), true
	case rt.State == store.BreakerHalfOpen && now.Before(rt.ProbeAt):
		return b.cfg.Refresh, true // another relay's probe is under way
	}
	return 0, false
}

// routeDown describes a route whose breaker is not closed, for the
// events a batch gives back: since when, and how long they wait.
type routeDown struct {
	since time.Time
	wait  time.Duration
}

// down returns the route's routeDown, or nil when it is closed.
func (b *breaker) down(route string) *routeDown {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	rt, ok := b.shared[route]
	if !ok || rt.State == store.BreakerClosed {
		return nil
	}
	w, waiting := b.waitOf(rt, b.dbNow())
	if !waiting {
		w = b.cfg.Refresh // a probe may go: the next claim decides who sends it
	}
	return &routeDown{since: rt.OpenedAt, wait: w}
}

// openSince returns when the route's breaker opened, if it is not closed.
func (b *breaker) openSince(route string) (time.Time, bool) {
	if b == nil {
		return time.Time{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	rt, ok := b.shared[route]
	if !ok || rt.State == store.BreakerClosed {
		return time.Time{}, false
	}
	return rt.OpenedAt, true
}

// change applies c to rt (at rt's version) in the database and in the
// local view; on a lost compare-and-set it re-reads the shared state.
func (b *breaker) change(ctx context.Context, rt store.Route, c store.RouteChange) bool {
	c.Route, c.Version, c.Actor = rt.Name, rt.Version, b.r.cfg.RelayID
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), breakerCallTimeout)
	ok, err := b.rs.ChangeRoute(cctx, c)
	cancel()
	if err != nil {
		b.r.log.Warn("could not change a circuit breaker", "route", rt.Name, "to", string(c.To), "err", err)
		return false
	}
	if ok {
		b.mu.Lock()
		if w := b.windows[rt.Name]; w != nil && c.To != store.BreakerOpen {
			w.reset()
		}
		b.mu.Unlock()
	}
	b.refresh(ctx) // the new version, or what another relay did
	return ok
}

// faultKind is what one attempt says about the destination.
type faultKind int

const (
	attemptOK    faultKind = iota // delivered, or refused as an event fault: the destination answers
	attemptFault                  // a destination fault
	attemptNone                   // not attempted, or interrupted by the relay: says nothing
)

// The causes that end a batch's publishing early.
var (
	// errPublishBudget: the batch's share of the lease ran out while the
	// destination had not answered; what was still unanswered then is a
	// destination fault (a destination that hangs).
	errPublishBudget = errors.New("the batch's publish budget (most of the lease) ran out")
	// errRelayStopping: the relay stopped and StopTimeout passed.
	errRelayStopping = errors.New("the relay is stopping")
	// errRouteOpened: every route the batch sends to is open now; what
	// was not answered yet is released to wait for the probe.
	errRouteOpened = errors.New("the circuit breaker of every route of the batch opened")
)

// kindOf classifies one sink result for the breaker. cause is why the
// publish context ended (context.Cause), nil while it runs.
func kindOf(err error, cause error) faultKind {
	switch {
	case err == nil, outbox.IsPermanent(err):
		return attemptOK
	case errors.Is(err, outbox.ErrNotAttempted):
		return attemptNone
	case cause != nil && !errors.Is(cause, errPublishBudget) &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// Cut short by the relay itself (stopping, or the route opened
		// meanwhile): it says nothing of the destination.
		return attemptNone
	}
	return attemptFault
}

// observe counts one attempt on a route that is closed in this relay's view.
func (b *breaker) observe(route string, k faultKind) {
	if b == nil || k == attemptNone {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.windows[route]
	if w == nil {
		w = &faultWindow{}
		b.windows[route] = w
	}
	w.add(b.r.now(), b.cfg.Window, k == attemptFault)
}

// batchDone counts one batch's attempts to a route (the probe aside):
// faults of attempts met a destination fault.
func (b *breaker) batchDone(route string, faults, attempts int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := b.windows[route]; w != nil {
		w.batchDone(faults, attempts)
	}
}

// settle opens the route's breaker when its faults call for it, and
// reports whether the route is now open (by this relay or another).
func (b *breaker) settle(ctx context.Context, route, lastErr string) (bool, time.Time) {
	if b == nil {
		return false, time.Time{}
	}
	b.mu.Lock()
	rt, known := b.shared[route]
	if known && rt.State != store.BreakerClosed {
		b.mu.Unlock()
		return true, rt.OpenedAt
	}
	w := b.windows[route]
	var trip bool
	var why string
	if w != nil {
		trip, why = w.trips(b.r.now(), b.cfg)
	}
	b.mu.Unlock()
	if !trip {
		return false, time.Time{}
	}
	if !known {
		rt = store.Route{Name: route, State: store.BreakerClosed}
	}
	if b.change(ctx, rt, store.RouteChange{To: store.BreakerOpen, ProbeIn: b.cfg.OpenMin, Opens: rt.Opens + 1,
		Reason: why, LastError: lastErr}) {
		b.r.log.Warn("circuit breaker opened: the route's events wait, PENDING and without a retry counted, until a probe gets through",
			"route", route, "reason", why, "last_error", lastErr, "probe_in", b.cfg.OpenMin)
	}
	since, open := b.openSince(route)
	return open, since
}

// probeDone records the probe's result on the route.
func (b *breaker) probeDone(ctx context.Context, route string, k faultKind, errText string) {
	mine := func() (store.Route, bool) {
		b.mu.Lock()
		defer b.mu.Unlock()
		rt, ok := b.shared[route]
		return rt, ok && rt.State == store.BreakerHalfOpen && rt.ProbeBy == b.r.cfg.RelayID
	}
	rt, ok := mine()
	if !ok {
		// The read after taking the probe may have failed: look again
		// before deciding that the probe is no longer this relay's, or
		// the route would wait a whole lease for another relay.
		b.refresh(ctx)
		if rt, ok = mine(); !ok {
			return // an operator or another relay moved it meanwhile
		}
	}
	down := time.Duration(0)
	if !rt.OpenedAt.IsZero() {
		b.mu.Lock()
		down = max(b.dbNow().Sub(rt.OpenedAt).Round(time.Millisecond), 0)
		b.mu.Unlock()
	}
	switch k {
	case attemptOK:
		if b.change(ctx, rt, store.RouteChange{To: store.BreakerClosed, Opens: rt.Opens, Reason: "probe delivered"}) {
			b.r.log.Info("circuit breaker closed: the probe got through; the route's events flow again",
				"route", route, "down_for", down, "opens", rt.Opens)
		}
	case attemptFault:
		next := b.probeWait(down)
		if b.change(ctx, rt, store.RouteChange{To: store.BreakerOpen, ProbeIn: next, Opens: rt.Opens,
			Reason: "probe failed", LastError: errText}) {
			b.r.log.Warn("circuit breaker probe failed: the route stays open", "route", route,
				"open_since", rt.OpenedAt, "next_probe_in", next, "last_error", errText)
		}
	default: // the probe was not sent or was cut short: probe again soon
		b.change(ctx, rt, store.RouteChange{To: store.BreakerOpen, Opens: rt.Opens,
			Reason: "probe not completed (relay stopping or event not sent)", LastError: rt.LastError})
	}
}

// probeWait is the wait before the next probe after a failed one, when
// the route has been down for down: as long again, between OpenMin and
// OpenMax, so that the waits about double while the outage lasts.
func (b *breaker) probeWait(down time.Duration) time.Duration {
	return min(max(down, b.cfg.OpenMin), b.cfg.OpenMax)
}

// breakerKey is the name a route has in the route table: the route
// itself, or for a route longer than the table holds, its start and a
// hash of the whole, so that two long routes never share a breaker.
func breakerKey(route string) string {
	if len(route) <= store.MaxRouteLen {
		return route
	}
	sum := sha256.Sum256([]byte(route))
	cut := store.MaxRouteLen - 18
	for cut > 0 && !utf8.RuneStart(route[cut]) {
		cut--
	}
	return route[:cut] + "~" + hex.EncodeToString(sum[:])[:16]
}
