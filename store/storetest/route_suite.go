package storetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// RunRoutes checks the routes of store.Store: the shared circuit-breaker state of
// routes and its audit trail.
func RunRoutes(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"OpenProbeClose", testRouteOpenProbeClose},
		{"StaleVersionChangesNothing", testRouteStaleVersion},
		{"OneProbeAmongMany", testRouteOneProbe},
		{"BadInputIsRefused", testRouteBadInput},
		{"AnyErrorTextIsStored", testRouteAnyText},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			tc.fn(t, h.Store)
		})
	}
}

func routeByName(t *testing.T, rs store.Store, name string) (store.Route, time.Time, bool) {
	t.Helper()
	snap, err := rs.Routes(context.Background())
	if err != nil {
		t.Fatalf("routes: %v", err)
	}
	for _, r := range snap.Routes {
		if r.Name == name {
			return r, snap.DBTime, true
		}
	}
	return store.Route{}, snap.DBTime, false
}

func mustChange(t *testing.T, rs store.Store, c store.RouteChange) {
	t.Helper()
	ok, err := rs.ChangeRoute(context.Background(), c)
	if err != nil || !ok {
		t.Fatalf("change %+v: applied=%v err=%v", c, ok, err)
	}
}

func testRouteOpenProbeClose(t *testing.T, rs store.Store) {
	ctx := context.Background()
	snap, err := rs.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Routes) != 0 {
		t.Fatalf("fresh outbox has routes: %+v", snap.Routes)
	}
	if d := time.Since(snap.DBTime); d > time.Minute || d < -time.Minute {
		t.Fatalf("database time %s is %s away from the local clock", snap.DBTime, d)
	}
	const route = "payment.events"
	mustChange(t, rs, store.RouteChange{Route: route, Version: 0, To: store.BreakerOpen, ProbeIn: 5 * time.Second,
		Opens: 1, Actor: "relay-a", Reason: "10 of 10 attempts failed", LastError: "503 Service Unavailable"})
	r, now, ok := routeByName(t, rs, route)
	if !ok {
		t.Fatal("opened route has no row")
	}
	if r.State != store.BreakerOpen || r.Version != 1 || r.Opens != 1 || r.LastError != "503 Service Unavailable" || r.Forced {
		t.Fatalf("opened route = %+v", r)
	}
	if r.OpenedAt.IsZero() || now.Sub(r.OpenedAt) > 5*time.Second || r.OpenedAt.After(now) {
		t.Fatalf("opened_at %s, database now %s", r.OpenedAt, now)
	}
	if d := r.ProbeAt.Sub(r.OpenedAt); d < 5*time.Second-time.Millisecond || d > 5*time.Second+time.Millisecond {
		t.Fatalf("probe_at is %s after opened_at, want 5s", d)
	}
	openedAt := r.OpenedAt

	mustChange(t, rs, store.RouteChange{Route: route, Version: 1, To: store.BreakerHalfOpen, ProbeIn: time.Minute,
		ProbeBy: "relay-b", Opens: 1, Actor: "relay-b", Reason: "probe"})
	r, _, _ = routeByName(t, rs, route)
	if r.State != store.BreakerHalfOpen || r.ProbeBy != "relay-b" || r.Version != 2 || !r.OpenedAt.Equal(openedAt) {
		t.Fatalf("half-open route = %+v (opened at %s)", r, openedAt)
	}

	mustChange(t, rs, store.RouteChange{Route: route, Version: 2, To: store.BreakerClosed, Actor: "relay-b", Reason: "probe delivered"})
	r, _, _ = routeByName(t, rs, route)
	if r.State != store.BreakerClosed || !r.OpenedAt.IsZero() || !r.ProbeAt.IsZero() || r.ProbeBy != "" || r.Version != 3 {
		t.Fatalf("closed route = %+v", r)
	}

	// A second route, for the filter of the log.
	mustChange(t, rs, store.RouteChange{Route: "merchant.events", To: store.BreakerOpen, Forced: true,
		Actor: "operator:alice", Reason: "maintenance"})
	log, err := rs.RouteLog(ctx, route, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ from, to store.BreakerState }{
		{store.BreakerHalfOpen, store.BreakerClosed}, {store.BreakerOpen, store.BreakerHalfOpen}, {store.BreakerClosed, store.BreakerOpen},
	}
	if len(log) != len(want) {
		t.Fatalf("log of %s has %d rows, want %d: %+v", route, len(log), len(want), log)
	}
	for i, w := range want {
		if log[i].From != w.from || log[i].To != w.to || log[i].Route != route {
			t.Errorf("log[%d] = %+v, want %s -> %s", i, log[i], w.from, w.to)
		}
	}
	if log[2].Actor != "relay-a" || log[2].Reason != "10 of 10 attempts failed" || log[2].LastError != "503 Service Unavailable" || log[2].At.IsZero() {
		t.Errorf("opening audit row = %+v", log[2])
	}
	all, err := rs.RouteLog(ctx, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 || all[0].Route != "merchant.events" || all[0].Actor != "operator:alice" {
		t.Fatalf("log of every route = %+v", all)
	}
	m, _, _ := routeByName(t, rs, "merchant.events")
	if !m.Forced || m.State != store.BreakerOpen {
		t.Fatalf("forced route = %+v", m)
	}
}

func testRouteStaleVersion(t *testing.T, rs store.Store) {
	ctx := context.Background()
	const route = "orders.events"
	mustChange(t, rs, store.RouteChange{Route: route, To: store.BreakerOpen, Actor: "relay-a", Reason: "r"})
	for _, v := range []int64{0, 2, 7} {
		ok, err := rs.ChangeRoute(ctx, store.RouteChange{Route: route, Version: v, To: store.BreakerClosed, Actor: "relay-b", Reason: "stale"})
		if err != nil || ok {
			t.Fatalf("change at stale version %d: applied=%v err=%v", v, ok, err)
		}
	}
	r, _, _ := routeByName(t, rs, route)
	if r.State != store.BreakerOpen || r.Version != 1 {
		t.Fatalf("route after stale changes = %+v", r)
	}
	log, err := rs.RouteLog(ctx, route, 10)
	if err != nil || len(log) != 1 {
		t.Fatalf("stale changes wrote audit rows: %+v (err %v)", log, err)
	}
}

func testRouteOneProbe(t *testing.T, rs store.Store) {
	ctx := context.Background()
	const route = "ledger.events"
	mustChange(t, rs, store.RouteChange{Route: route, To: store.BreakerOpen, Actor: "relay-0", Reason: "r"})
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, errs := 0, []error{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := rs.ChangeRoute(ctx, store.RouteChange{Route: route, Version: 1, To: store.BreakerHalfOpen,
				ProbeIn: time.Minute, ProbeBy: "relay-" + string(rune('a'+i)), Actor: "relay-" + string(rune('a'+i)), Reason: "probe"})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if ok {
				won++
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent probes: %v", errs)
	}
	if won != 1 {
		t.Fatalf("%d of %d relays took the probe, want exactly 1", won, n)
	}
	log, err := rs.RouteLog(ctx, route, 20)
	if err != nil || len(log) != 2 {
		t.Fatalf("audit rows = %+v (err %v), want the opening and one probe", log, err)
	}
}

func testRouteBadInput(t *testing.T, rs store.Store) {
	ctx := context.Background()
	for _, c := range []store.RouteChange{
		{Route: "", To: store.BreakerOpen, Actor: "a"},
		{Route: strings.Repeat("x", store.MaxRouteLen+1), To: store.BreakerOpen, Actor: "a"},
		{Route: "r", To: "AJAR", Actor: "a"},
		{Route: "r", To: store.BreakerOpen},
		{Route: "r", To: store.BreakerOpen, Actor: "a", Version: -1},
	} {
		ok, err := rs.ChangeRoute(ctx, c)
		if ok || !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("change %.60v: applied=%v err=%v, want ErrInvalidConfig", c, ok, err)
		}
	}
	snap, err := rs.Routes(ctx)
	if err != nil || len(snap.Routes) != 0 {
		t.Fatalf("refused changes left rows: %+v (err %v)", snap.Routes, err)
	}
}

// testRouteAnyText: whatever a sink's error says (NUL, invalid UTF-8, a
// long text in a multi-byte script) is stored, cut at a character.
func testRouteAnyText(t *testing.T, rs store.Store) {
	ctx := context.Background()
	text := "dial tcp: \x00 refused \xff\xfe " + strings.Repeat("연결이 거부되었습니다 ", 300)
	route := "노드.events"
	mustChange(t, rs, store.RouteChange{Route: route, To: store.BreakerOpen, Actor: "relay-\xff", Reason: text, LastError: text})
	r, _, ok := routeByName(t, rs, route)
	if !ok {
		t.Fatal("route with a non-ASCII name has no row")
	}
	if r.LastError == "" || strings.ContainsRune(r.LastError, 0) || len([]rune(r.LastError)) > store.MaxRouteTextRunes {
		t.Fatalf("stored error is %d runes, NUL %v", len([]rune(r.LastError)), strings.ContainsRune(r.LastError, 0))
	}
	if !strings.HasPrefix(r.LastError, "dial tcp: ") {
		t.Fatalf("stored error = %.40q", r.LastError)
	}
	log, err := rs.RouteLog(ctx, route, 1)
	if err != nil || len(log) != 1 || !strings.HasPrefix(log[0].Reason, "dial tcp: ") {
		t.Fatalf("audit row = %+v (err %v)", log, err)
	}
}
