package main

import (
	"strings"
	"testing"
)

// TestSinkKinds pins the sink wiring: every scheme the CLI offers, and
// which of them the relay waits on (the brokers, which connect in the
// background) before it claims events.
func TestSinkKinds(t *testing.T) {
	t.Parallel()
	want := map[string]bool{
		"http": false, "https": false, "stdout": false, "discard": false,
		"amqp": true, "amqps": true, "kafka": true, "nats": true, "redis": true, "rediss": true,
	}
	if len(sinkKinds) != len(want) {
		t.Errorf("%d sink schemes (%s), want %d", len(sinkKinds), sinkForms(), len(want))
	}
	for scheme, connects := range want {
		kind, ok := sinkKinds[scheme]
		if !ok || kind.open == nil {
			t.Errorf("scheme %s:// has no opener", scheme)
			continue
		}
		if kind.connects != connects {
			t.Errorf("scheme %s:// connects in the background = %v, want %v", scheme, kind.connects, connects)
		}
		if !strings.Contains(sinkForms(), scheme+"://") {
			t.Errorf("the list of sink forms %q lacks %s://", sinkForms(), scheme)
		}
	}
}
