package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
)

// Replayed is the audit outcome of an event an operator sent again.
const Replayed OutcomeKind = "REPLAYED"

// ReplayChange returns a delivered (PROCESSED) event to PENDING so that it
// is delivered again with the same event id. SKIPPED events are not
// replayed: they were never delivered, and their aggregate has moved on
// past them.
var ReplayChange = OperatorChange{Kind: Replayed, From: []outbox.Status{outbox.StatusProcessed}, To: outbox.StatusPending}

// ReplayFilter selects the delivered (PROCESSED) events that Store.Replay
// sends again. At least one field must be set, so that a replay never
// takes the whole outbox by accident.
type ReplayFilter struct {
	// AggregateType and AggregateID keep only the events of that
	// aggregate type, or of that aggregate.
	AggregateType, AggregateID string
	// EventType keeps only the events of that type.
	EventType string
	// Since and Until bound when the event was delivered (processed_at):
	// Since <= processed_at < Until. Zero: no bound.
	Since, Until time.Time
}

// Validate returns an outbox.ErrInvalidConfig error that says what to fix.
func (f ReplayFilter) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: replay filter: %s", outbox.ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case f == ReplayFilter{}:
		return bad("name at least one of the aggregate type, the aggregate id, the event type, since or until")
	case f.AggregateID != "" && f.AggregateType == "":
		return bad("an aggregate id needs its aggregate type")
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until):
		return bad("since %s is not before until %s", f.Since.UTC().Format(time.RFC3339), f.Until.UTC().Format(time.RFC3339))
	case strings.ContainsRune(f.AggregateType+f.AggregateID+f.EventType, 0):
		return bad("a name contains a NUL byte")
	}
	return nil
}

// String describes the filter for the audit trail and messages:
// "aggregate order/42, delivered since 2026-12-01T10:00:00Z".
func (f ReplayFilter) String() string {
	var parts []string
	switch {
	case f.AggregateID != "":
		parts = append(parts, "aggregate "+f.AggregateType+"/"+f.AggregateID)
	case f.AggregateType != "":
		parts = append(parts, "aggregate type "+f.AggregateType)
	}
	if f.EventType != "" {
		parts = append(parts, "event type "+f.EventType)
	}
	if !f.Since.IsZero() {
		parts = append(parts, "delivered since "+f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "delivered before "+f.Until.UTC().Format(time.RFC3339Nano))
	}
	return strings.Join(parts, ", ")
}

// ReplayRequest asks Store.Replay to send the delivered events that match
// Filter again, audited under Action (its EventID is ignored; Reason is
// required). A DryRun counts what the replay would do and changes nothing.
type ReplayRequest struct {
	Filter ReplayFilter
	Action OperatorAction
	DryRun bool
}

// Validate returns an outbox.ErrInvalidConfig error that says what to fix.
func (r ReplayRequest) Validate() error {
	if err := r.Filter.Validate(); err != nil {
		return err
	}
	if strings.TrimSpace(r.Action.Reason) == "" {
		return fmt.Errorf("%w: replay: give a reason (it goes in every replayed event's audit row)", outbox.ErrInvalidConfig)
	}
	return nil
}

// ReplayResult is what a replay did, or a dry run would do.
type ReplayResult struct {
	// Events is how many events were (would be) returned to PENDING.
	Events int64
	// Aggregates is how many aggregates they belong to.
	Aggregates int64
	// Held lists the aggregates left alone because one of their events
	// was in flight, FAILED or BLOCKED: replaying behind it would break
	// the aggregate's order. Their matching events are not in Events.
	Held []HeldAggregate
}

// HeldAggregate is an aggregate a replay left alone, with the event that
// held it and how many of its events matched the filter.
type HeldAggregate struct {
	AggregateType, AggregateID string
	EventID                    outbox.EventID
	Status                     outbox.Status
	Matched                    int64
}

// String names the aggregate and why it was left alone.
func (h HeldAggregate) String() string {
	return fmt.Sprintf("aggregate %s/%s: event %s is %s (%d matching events not replayed)",
		h.AggregateType, h.AggregateID, h.EventID, h.Status, h.Matched)
}

// RecordReplay writes a replay's record to the audit log of s (kind
// "replay"), the dry run's too: who asked, why, the filter and what it
// took (or would take). The events a replay takes also get an audit row
// each (REPLAYED).
func RecordReplay(ctx context.Context, s any, req ReplayRequest, res ReplayResult) error {
	return RecordNote(ctx, s, "replay", "operator:"+req.Action.Actor, map[string]any{"dry_run": req.DryRun,
		"filter": req.Filter.String(), "reason": req.Action.Reason, "events": res.Events, "aggregates": res.Aggregates,
		"held_aggregates": len(res.Held)})
}
