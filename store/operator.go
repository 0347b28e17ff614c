package store

import (
	"fmt"
	"slices"
	"strings"

	"github.com/txoutbox/outbox"
)

// OperatorChange describes an operator action on one event: the outcome of
// the audit row it writes, the statuses it applies to, and the status it
// moves the event to.
type OperatorChange struct {
	Kind OutcomeKind
	From []outbox.Status
	To   outbox.Status
}

// The operator actions of Store.Requeue and Store.Skip.
var (
	// RequeueChange returns a FAILED or EXPIRED event to PENDING.
	RequeueChange = OperatorChange{Kind: Requeued, From: []outbox.Status{outbox.StatusFailed, outbox.StatusExpired}, To: outbox.StatusPending}
	// SkipChange moves a FAILED event to SKIPPED.
	SkipChange = OperatorChange{Kind: Skipped, From: []outbox.Status{outbox.StatusFailed}, To: outbox.StatusSkipped}
)

// Verb names the action in messages and operation names: "requeued",
// "skipped".
func (c OperatorChange) Verb() string { return strings.ToLower(string(c.Kind)) }

// Check returns nil when an event that is in status may undergo the change,
// and otherwise an outbox.ErrConflict that names the statuses it applies to.
func (c OperatorChange) Check(a OperatorAction, status string) error {
	if slices.Contains(c.From, outbox.Status(status)) {
		return nil
	}
	return fmt.Errorf("%w: event %s is %s; %s applies to %s events", outbox.ErrConflict, a.EventID, status,
		c.Verb(), strings.Join(StatusNames(c.From), " or "))
}
