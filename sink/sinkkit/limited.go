package sinkkit

import (
	"context"
	"fmt"
	"github.com/txoutbox/outbox/sink"
	"math"
	"sync"
	"time"

	"github.com/txoutbox/outbox"
)

// LimitConfig configures [Limit].
type LimitConfig struct {
	// Default are the limits of every route without an entry in Routes,
	// each route counted on its own (e.g. from the sink URL's
	// ?rate=200/s&burst=50&max_in_flight=32).
	Default Limits
	// Routes are per-route limits, by the route's name as the sink's
	// Destination gives it (e.g. "payment.events"); they replace Default.
	Routes map[string]Limits
}

func (c LimitConfig) validate() error {
	if err := c.Default.Validate(); err != nil {
		return fmt.Errorf("%w: sink limits: %v", outbox.ErrInvalidConfig, err)
	}
	for r, l := range c.Routes {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("%w: limits of route %q: %v", outbox.ErrInvalidConfig, r, err)
		}
	}
	return nil
}

// IsZero reports whether c limits nothing.
func (c LimitConfig) IsZero() bool {
	if !c.Default.IsZero() {
		return false
	}
	for _, l := range c.Routes {
		if !l.IsZero() {
			return false
		}
	}
	return true
}

// Limited is a sink that keeps each route of the sink it wraps within
// its limits: a token bucket (rate and burst) and a cap on the messages
// in flight, per route, shared by concurrent Publish calls. Over the
// limit, Publish waits: it is backpressure, never an error. A message
// whose deadline would pass while it waits is not sent: its result is a
// [NotSentError] saying so (it matches [outbox.ErrNotAttempted] and
// context.DeadlineExceeded), and the later messages of its aggregate in
// the call are not sent either. Order per aggregate is kept: a message
// goes to the wrapped sink only after the earlier messages of its
// aggregate in the call were delivered.
//
// Routes come from the wrapped sink's [sink.Destinations] (one route,
// [sink.DefaultDestination], when it has none). Limited passes Destination,
// Reachable and Close through.
type Limited struct {
	inner sink.Sink
	cfg   LimitConfig
	pre   Precheck
	now   func() time.Time

	mu     sync.Mutex
	routes map[string]*bucket
}

var (
	_ sink.Sink         = (*Limited)(nil)
	_ sink.Destinations = (*Limited)(nil)
	_ sink.Health       = (*Limited)(nil)
)

// Limit returns s kept within cfg. Errors match [outbox.ErrInvalidConfig].
func Limit(s sink.Sink, cfg LimitConfig) (*Limited, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Limited{inner: s, cfg: cfg, pre: Precheck{Sink: "sink limits"}, now: time.Now, routes: map[string]*bucket{}}, nil
}

// Unwrap returns the wrapped sink.
func (l *Limited) Unwrap() sink.Sink { return l.inner }

// Destination implements [sink.Destinations] with the wrapped sink's routes.
func (l *Limited) Destination(m *outbox.Message) string { return sink.DestinationOf(l.inner, m) }

// Reachable implements [sink.Health] with the wrapped sink's: ok, with no
// error, when the wrapped sink does not report its health.
func (l *Limited) Reachable() (bool, error, time.Time) {
	if h, ok := l.inner.(sink.Health); ok {
		return h.Reachable()
	}
	return true, nil, time.Time{}
}

// Close closes the wrapped sink.
func (l *Limited) Close(ctx context.Context) error { return l.inner.Close(ctx) }

// bucket is the state of one limited route.
type bucket struct {
	limits   Limits
	tokens   float64
	last     time.Time
	inflight int
	waiters  int           // wait calls that need a slot freed
	released chan struct{} // closed (and replaced) when a slot is freed and someone waits
}

// maxIdleRoutes bounds the routes kept: past it, routes that are idle and
// full are forgotten (a route template with {aggregate_id} makes many).
const maxIdleRoutes = 4096

// bucketFor returns the state of route, or nil when it is not limited.
// l.mu is held.
func (l *Limited) bucketFor(route string, now time.Time) *bucket {
	if b, ok := l.routes[route]; ok {
		return b
	}
	lim, ok := l.cfg.Routes[route]
	if !ok {
		lim = l.cfg.Default
	}
	if lim.IsZero() {
		return nil
	}
	lim = lim.withDefaults()
	if len(l.routes) >= maxIdleRoutes {
		for r, b := range l.routes {
			if b.inflight == 0 && b.refill(now) >= float64(b.limits.Burst) {
				delete(l.routes, r)
			}
		}
	}
	b := &bucket{limits: lim, tokens: float64(lim.Burst), last: now, released: make(chan struct{})}
	l.routes[route] = b
	return b
}

// refill adds the tokens earned since the last look and returns them.
func (b *bucket) refill(now time.Time) float64 {
	if b.limits.Rate > 0 && now.After(b.last) {
		b.tokens = math.Min(float64(b.limits.Burst), b.tokens+b.limits.Rate*now.Sub(b.last).Seconds())
		b.last = now
	}
	return b.tokens
}

// take takes a token and a slot if both are there. Otherwise it says how
// long until a token is (wait > 0), or that a slot must be freed first
// (wait == 0).
func (b *bucket) take(now time.Time) (ok bool, wait time.Duration) {
	if b.limits.MaxInFlight > 0 && b.inflight >= b.limits.MaxInFlight {
		return false, 0
	}
	if b.limits.Rate > 0 {
		if t := b.refill(now); t < 1 {
			return false, max(time.Duration((1-t)/b.limits.Rate*float64(time.Second)), time.Millisecond)
		}
		b.tokens--
	}
	b.inflight++
	return true, 0
}

func (b *bucket) release() {
	b.inflight--
	if b.waiters > 0 {
		close(b.released)
		b.released = make(chan struct{})
	}
}

// Publish sends msgs through the wrapped sink, each once its route has a
// token and a free slot; see [Limited].
func (l *Limited) Publish(ctx context.Context, msgs []outbox.Message) []error {
	buckets := make([]*bucket, len(msgs))
	routes := make([]string, len(msgs))
	limited := false
	l.mu.Lock()
	now := l.now()
	for i := range msgs {
		routes[i] = sink.DestinationOf(l.inner, &msgs[i])
		buckets[i] = l.bucketFor(routes[i], now)
		limited = limited || buckets[i] != nil
	}
	l.mu.Unlock()
	if !limited {
		return l.inner.Publish(ctx, msgs)
	}

	res := make([]error, len(msgs))
	keys := make([]string, len(msgs))
	for i := range msgs {
		keys[i] = msgs[i].OrderingKey()
	}
	failed := map[string]int{} // ordering key -> its message that did not succeed
	pending := make([]int, len(msgs))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		// A round: every message that can go now, in order, skipping a
		// key from its first message that cannot.
		var round, later []int
		var held map[string]bool // keys stopped at a message that must wait
		l.mu.Lock()
		now := l.now()
		for _, i := range pending {
			k := keys[i]
			if f, ok := failed[k]; ok {
				res[i] = l.pre.Behind(&msgs[i], &msgs[f], nil)
				continue
			}
			if !held[k] {
				if err := tooLate(buckets[i], routes[i], &msgs[i], now); err != nil {
					res[i] = err
					failed[k] = i
					continue
				}
				if ok, _ := l.takeFor(buckets[i], now); ok {
					round = append(round, i)
					continue
				}
				if held == nil {
					held = map[string]bool{}
				}
				held[k] = true
			}
			later = append(later, i)
		}
		l.mu.Unlock()
		if len(round) == 0 {
			if len(later) == 0 {
				break
			}
			// Nothing can go: wait for the first message's route.
			i := later[0]
			if err := l.wait(ctx, buckets[i], routes[i], &msgs[i]); err != nil {
				res[i] = err
				failed[keys[i]] = i
				pending = later[1:]
				continue
			}
			round, later = []int{i}, later[1:]
		}
		sub := make([]outbox.Message, len(round))
		for j, i := range round {
			sub[j] = msgs[i]
		}
		out := l.inner.Publish(ctx, sub)
		l.mu.Lock()
		for j, i := range round {
			if b := buckets[i]; b != nil {
				b.release()
			}
			if j < len(out) {
				res[i] = out[j]
			} else {
				res[i] = fmt.Errorf("sink limits: the wrapped sink returned %d results for %d messages", len(out), len(sub))
			}
			if k := keys[i]; res[i] != nil {
				if _, ok := failed[k]; !ok {
					failed[k] = i
				}
			}
		}
		l.mu.Unlock()
		pending = later
	}
	return res
}

// takeFor is take for a message whose route may be unlimited (b nil).
func (l *Limited) takeFor(b *bucket, now time.Time) (bool, time.Duration) {
	if b == nil {
		return true, 0
	}
	return b.take(now)
}

// tooLate returns a [sink.TooLateError] when m has less time before its
// deadline than b's MinTimeLeft (b nil: no limits), else nil.
func tooLate(b *bucket, route string, m *outbox.Message, now time.Time) error {
	if b == nil || b.limits.MinTimeLeft <= 0 || m.Deadline.IsZero() {
		return nil
	}
	if left := m.Deadline.Sub(now); left < b.limits.MinTimeLeft {
		return &sink.TooLateError{Route: route, Left: max(left, 0), Min: b.limits.MinTimeLeft}
	}
	return nil
}

// wait takes a token and a slot of b for m, waiting as long as needed,
// unless ctx ends, m's deadline would pass first, or m would be left
// with less than the route's MinTimeLeft.
func (l *Limited) wait(ctx context.Context, b *bucket, route string, m *outbox.Message) error {
	for {
		// Take, or register as a waiter for a slot, in one step, so that a
		// slot freed in between is not missed.
		l.mu.Lock()
		now := l.now()
		if err := tooLate(b, route, m, now); err != nil {
			l.mu.Unlock()
			return err
		}
		ok, d := l.takeFor(b, now)
		var released chan struct{}
		if !ok && d == 0 {
			released = b.released
			b.waiters++
		}
		l.mu.Unlock()
		if ok {
			return nil
		}
		err := ctx.Err()
		if err == nil && !m.Deadline.IsZero() && !now.Add(d).Before(m.Deadline) {
			err = context.DeadlineExceeded
		}
		if err == nil {
			err = sleep(ctx, d, released, m.Deadline)
		}
		if released != nil {
			l.mu.Lock()
			b.waiters--
			l.mu.Unlock()
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return l.pre.NotSent(m, ReasonContextEnded, ctx.Err())
		default:
			return l.pre.NotSent(m, "the route's limits would hold it past its deadline "+m.Deadline.Format(time.RFC3339Nano), context.DeadlineExceeded)
		}
	}
}

// sleep waits for d (if positive) or for released, whichever comes
// first. It returns ctx's error if ctx ends first, or
// context.DeadlineExceeded if deadline (when set) passes first.
func sleep(ctx context.Context, d time.Duration, released <-chan struct{}, deadline time.Time) error {
	var timer, dl <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		dl = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-dl:
		return context.DeadlineExceeded
	case <-timer:
	case <-released:
	}
	return nil
}
