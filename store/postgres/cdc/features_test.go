package cdc_test

import (
	"testing"

	"github.com/txoutbox/outbox/store"
)

// A source declares itself the relay's Listener (the replication stream
// wakes the relay, not LISTEN/NOTIFY), and the rest of the PostgreSQL
// store's capabilities as they are.
func TestSourceDeclaresItselfTheListener(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	src := h.source(t, cdcConfig())
	f := src.Features()
	if f.Listener != store.Listener(src) {
		t.Errorf("Features().Listener = %T, want the source itself", f.Listener)
	}
	want := h.store.Features()
	want.Listener = nil
	f.Listener = nil
	if f != want {
		t.Errorf("the source declares %+v besides its Listener, want the store's %+v", f, want)
	}
}
