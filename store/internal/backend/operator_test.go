package backend

import (
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

func TestOperatorAudit(t *testing.T) {
	a := store.OperatorAction{EventID: outbox.EventID{1}, Reason: "fixed upstream"}
	relay, text := OperatorAudit(store.SkipChange, a, "FAILED")
	if relay != "operator:operator" || text != "skipped by operator (was FAILED): fixed upstream" {
		t.Fatalf("audit: %q %q", relay, text)
	}
}
