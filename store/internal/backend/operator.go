package backend

import (
	"fmt"

	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
)

// OperatorAudit returns the relay_id and the error text of the audit row
// that the change c writes for an event that was in status: "operator:"
// and the actor (a.Actor, "operator" when empty), and "<verb> by <actor>
// (was <status>)" followed by ": <a.Reason>" when a reason is given.
func OperatorAudit(c store.OperatorChange, a store.OperatorAction, status string) (relayID, text string) {
	actor := a.Actor
	if actor == "" {
		actor = "operator"
	}
	text = fmt.Sprintf("%s by %s (was %s)", c.Verb(), actor, status)
	if a.Reason != "" {
		text += ": " + a.Reason
	}
	return textlimit.StorableText("operator:"+actor, textlimit.MaxRelayIDRunes), textlimit.ErrorText(text)
}
