package storetest

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// Capabilities lists the optional capabilities a backend promises (its
// doc.go, the README's Backends section): the fields of [store.Features]
// that it sets. RunFeatures checks that the store declares exactly these.
type Capabilities struct {
	SkipLocked, ClaimBehindOwn bool
	Listener, EnqueueObserver  bool
	CursorGuard, GaugeLeaser   bool
	AdoptionReporter           bool
}

// declared returns what f declares, as Capabilities.
func declared(f store.Features) Capabilities {
	return Capabilities{
		SkipLocked:       f.SkipLocked,
		ClaimBehindOwn:   f.ClaimBehindOwn,
		Listener:         f.Listener != nil,
		EnqueueObserver:  f.EnqueueObserver != nil,
		CursorGuard:      f.CursorGuard != nil,
		GaugeLeaser:      f.GaugeLeaser != nil,
		AdoptionReporter: f.AdoptionReporter != nil,
	}
}

// RunFeatures checks the store's declared capabilities (Store.Features):
// they are the ones the harness says the backend promises
// (Harness.Promises); every capability interface the store's type
// implements is declared, and none it lacks; and each declared capability
// works when called.
func RunFeatures(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"DeclaredAsPromised", testFeaturesAsPromised},
		{"DeclaredAsImplemented", testFeaturesAsImplemented},
		{"ListenerWakes", testListenerWakes},
		{"EnqueueObserverSignals", testEnqueueObserverSignals},
		{"CursorGuardChecks", testCursorGuardChecks},
		{"GaugeLeaserLeases", testGaugeLeaserLeases},
		{"AdoptionReporterReports", testAdoptionReporterReports},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

func testFeaturesAsPromised(t *testing.T, h *Harness) {
	if got := declared(h.Store.Features()); got != h.Promises {
		t.Errorf("%T declares %+v, the backend promises %+v", h.Store, got, h.Promises)
	}
}

// testFeaturesAsImplemented compares the capability interfaces the
// store's type has (by reflection: callers never look for them there)
// with those its Features declares.
func testFeaturesAsImplemented(t *testing.T, h *Harness) {
	f := h.Store.Features()
	typ := reflect.TypeOf(h.Store)
	for _, c := range []struct {
		name  string
		iface reflect.Type
		field any
	}{
		{"Listener", reflect.TypeFor[store.Listener](), f.Listener},
		{"EnqueueObserver", reflect.TypeFor[store.EnqueueObserver](), f.EnqueueObserver},
		{"CursorGuard", reflect.TypeFor[store.CursorGuard](), f.CursorGuard},
		{"GaugeLeaser", reflect.TypeFor[store.GaugeLeaser](), f.GaugeLeaser},
		{"AdoptionReporter", reflect.TypeFor[store.AdoptionReporter](), f.AdoptionReporter},
	} {
		has, set := typ.Implements(c.iface), c.field != nil
		switch {
		case has && !set:
			t.Errorf("%s implements store.%s but Features does not declare it", typ, c.name)
		case set && !has:
			t.Errorf("Features of %s declares store.%s, which the store does not implement (%T)", typ, c.name, c.field)
		}
	}
}

// testListenerWakes: a listener wakes once it is listening (after each
// connect), and again when an event is committed; it returns nil when
// its context ends.
func testListenerWakes(t *testing.T, h *Harness) {
	l := h.Store.Features().Listener
	if l == nil {
		t.Skip("the store declares no Listener")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wakes := make(chan struct{}, 64)
	done := make(chan error, 1)
	go func() {
		done <- l.Listen(ctx, func() {
			select {
			case wakes <- struct{}{}:
			default:
			}
		})
	}()
	awaitWake := func(what string) {
		t.Helper()
		select {
		case <-wakes:
		case err := <-done:
			t.Fatalf("Listen returned %v before %s", err, what)
		case <-time.After(30 * time.Second):
			t.Fatalf("no wake-up %s within 30s", what)
		}
	}
	awaitWake("once listening")
	for len(wakes) > 0 { // wake-ups from before the commit are not the one awaited
		<-wakes
	}
	Enqueue(t, h, PaymentEvent("feature-listen", 1))
	awaitWake("after a commit")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Listen returned %v when its context ended, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Listen did not return within 30s of its context's end")
	}
}

// testEnqueueObserverSignals: a registered observer runs on each Enqueue
// through the store, before Enqueue returns; once removed, it runs no more.
func testEnqueueObserverSignals(t *testing.T, h *Harness) {
	o := h.Store.Features().EnqueueObserver
	if o == nil {
		t.Skip("the store declares no EnqueueObserver")
	}
	var calls atomic.Int64
	remove := o.OnEnqueue(func() { calls.Add(1) })
	Enqueue(t, h, PaymentEvent("feature-observe", 1))
	if n := calls.Load(); n != 1 {
		t.Fatalf("observer ran %d times for one Enqueue, want 1", n)
	}
	remove()
	Enqueue(t, h, PaymentEvent("feature-observe", 2))
	if n := calls.Load(); n != 1 {
		t.Fatalf("observer ran %d times after it was removed, want 1 (from before)", n)
	}
}

// testCursorGuardChecks: the suite's database draws ids in order (the
// migrations' sequence), so the check passes, and a fresh store has
// found nothing behind its cursors.
func testCursorGuardChecks(t *testing.T, h *Harness) {
	g := h.Store.Features().CursorGuard
	if g == nil {
		t.Skip("the store declares no CursorGuard")
	}
	if err := g.CheckIDOrder(context.Background()); err != nil {
		t.Errorf("CheckIDOrder on the migrated table: %v", err)
	}
	if n := g.FoundBehindCursors(); n != 0 {
		t.Errorf("FoundBehindCursors of a fresh store = %d, want 0", n)
	}
}

// testGaugeLeaserLeases: the lease is taken, reads a snapshot on its own
// session that counts what the store counts, and is given back.
func testGaugeLeaserLeases(t *testing.T, h *Harness) {
	leaser := h.Store.Features().GaugeLeaser
	if leaser == nil {
		t.Skip("the store declares no GaugeLeaser")
	}
	ctx := context.Background()
	Enqueue(t, h, PaymentEvent("feature-gauge", 1), PaymentEvent("feature-gauge", 2))
	lease, ok, err := leaser.TryGaugeLease(ctx)
	if err != nil || !ok {
		t.Fatalf("TryGaugeLease = %v, %v; want the lease", ok, err)
	}
	snap, err := lease.Snapshot(ctx, store.SnapshotRequest{})
	lease.Release()
	if err != nil {
		t.Fatalf("snapshot on the lease: %v", err)
	}
	if n := snap.Counts[outbox.StatusPending]; n != 2 {
		t.Errorf("the lease's snapshot counts %d PENDING events, want 2", n)
	}
}

// testAdoptionReporterReports: a table the migrations created was not
// adopted.
func testAdoptionReporterReports(t *testing.T, h *Harness) {
	ar := h.Store.Features().AdoptionReporter
	if ar == nil {
		t.Skip("the store declares no AdoptionReporter")
	}
	if at, adopted, err := ar.AdoptedAt(context.Background()); err != nil || adopted {
		t.Errorf("AdoptedAt on a table outbox created = %v, %v, %v; want not adopted", at, adopted, err)
	}
}
