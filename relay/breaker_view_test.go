package relay

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store"
)

// memRoutes keeps the routes of a store in memory. A snapshot put in late is
// what the next Routes call returns instead of the rows: a read that
// began before a change and ended after it.
type memRoutes struct {
	mu     sync.Mutex
	rows   map[string]store.Route
	late   *store.RouteSnapshot
	failed int // Routes calls to fail from now on
}

func (m *memRoutes) snapshot() store.RouteSnapshot {
	snap := store.RouteSnapshot{DBTime: time.Now()}
	for _, rt := range m.rows {
		snap.Routes = append(snap.Routes, rt)
	}
	return snap
}

func (m *memRoutes) Routes(context.Context) (store.RouteSnapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed > 0 {
		m.failed--
		return store.RouteSnapshot{}, context.DeadlineExceeded
	}
	if m.late != nil {
		snap := *m.late
		m.late = nil
		return snap, nil
	}
	return m.snapshot(), nil
}

func (m *memRoutes) ChangeRoute(_ context.Context, c store.RouteChange) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt := m.rows[c.Route]
	if rt.Version != c.Version {
		return false, nil
	}
	now := time.Now()
	next := store.Route{Name: c.Route, State: c.To, Version: rt.Version + 1, Opens: c.Opens,
		ProbeBy: c.ProbeBy, Forced: c.Forced, LastError: c.LastError, UpdatedAt: now, OpenedAt: rt.OpenedAt}
	if c.To != store.BreakerClosed {
		next.ProbeAt = now.Add(c.ProbeIn)
		if next.OpenedAt.IsZero() {
			next.OpenedAt = now
		}
	} else {
		next.OpenedAt = time.Time{}
	}
	m.rows[c.Route] = next
	return true, nil
}

func (m *memRoutes) RouteLog(context.Context, string, int) ([]store.RouteLogEntry, error) {
	return nil, nil
}

func (m *memRoutes) state(route string) store.Route {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rows[route]
}

// newViewBreaker is a breaker over m whose route "r" is OPEN and due for a
// probe.
func newViewBreaker(t *testing.T, m *memRoutes) *breaker {
	t.Helper()
	r := &Relay{cfg: Config{RelayID: "relay-a", Lease: time.Minute}, log: slog.New(slog.DiscardHandler), now: time.Now}
	r.hooks = newHooks(r)
	b := &breaker{r: r, cfg: BreakerConfig{}.withDefaults(), rs: m, shared: map[string]store.Route{},
		windows: map[string]*faultWindow{}, reported: map[string]store.BreakerState{}}
	past := time.Now().Add(-time.Second)
	m.rows = map[string]store.Route{"r": {Name: "r", State: store.BreakerOpen, Version: 1, Opens: 1,
		OpenedAt: past.Add(-time.Minute), ProbeAt: past}}
	b.refresh(context.Background())
	return b
}

// takeProbe has b take the probe of route "r".
func takeProbe(t *testing.T, b *breaker) {
	t.Helper()
	if ad := b.admit(context.Background(), "r"); ad.kind != admitProbe {
		t.Fatalf("admit = %v, want the probe", ad.kind)
	}
}

// deliverProbe reports b's probe of "r" delivered; the route must close.
func deliverProbe(t *testing.T, b *breaker, m *memRoutes) {
	t.Helper()
	b.probeDone(context.Background(), "r", attemptOK, "")
	if rt := m.state("r"); rt.State != store.BreakerClosed {
		t.Fatalf("the delivered probe left the route %s (version %d), want CLOSED", rt.State, rt.Version)
	}
}

// TestBreakerProbeSurvivesALateRead: a read of the shared state that began
// before this relay took the probe and ended after it must not make the
// relay forget its probe; if it did, the delivered probe would not close
// the route, which would wait a whole lease for another relay to take the
// probe over.
func TestBreakerProbeSurvivesALateRead(t *testing.T) {
	ctx := context.Background()
	m := &memRoutes{}
	b := newViewBreaker(t, m)
	before := m.snapshot() // the route OPEN, at version 1
	takeProbe(t, b)
	m.mu.Lock()
	m.late = &before
	m.mu.Unlock()
	b.refresh(ctx) // the late read ends
	if rt := b.shared["r"]; rt.Version != 2 || rt.State != store.BreakerHalfOpen {
		t.Errorf("after a late read the view holds version %d %s, want version 2 HALF_OPEN", rt.Version, rt.State)
	}
	deliverProbe(t, b, m)
}

// TestBreakerProbeSurvivesAFailedRead: when the read after taking the
// probe fails, the relay still records its probe's result.
func TestBreakerProbeSurvivesAFailedRead(t *testing.T) {
	m := &memRoutes{}
	b := newViewBreaker(t, m)
	m.mu.Lock()
	m.failed = 1 // the read inside change, after the probe is taken
	m.mu.Unlock()
	takeProbe(t, b)
	deliverProbe(t, b, m)
}

// TestBreakerProbeOfAnotherRelay: a relay whose probe another relay took
// over records nothing.
func TestBreakerProbeOfAnotherRelay(t *testing.T) {
	ctx := context.Background()
	m := &memRoutes{}
	b := newViewBreaker(t, m)
	takeProbe(t, b)
	m.mu.Lock()
	rt := m.rows["r"]
	rt.ProbeBy, rt.Version = "relay-b", rt.Version+1
	m.rows["r"] = rt
	m.mu.Unlock()
	b.probeDone(ctx, "r", attemptOK, "")
	if got := m.state("r"); got.State != store.BreakerHalfOpen || got.ProbeBy != "relay-b" {
		t.Fatalf("the route is %s by %q, want HALF_OPEN by relay-b", got.State, got.ProbeBy)
	}
}
