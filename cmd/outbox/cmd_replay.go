package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// EventsReplayCmd sends delivered events again, with their ids.
type EventsReplayCmd struct {
	AggregateType string `help:"Only events of this aggregate type."`
	AggregateID   string `help:"Only events of this aggregate (with --aggregate-type)."`
	Type          string `help:"Only events of this event type."`
	Since         string `help:"Only events delivered at or after this time (RFC 3339, e.g. 2026-12-01T10:00:00Z, or a duration ago, e.g. 2h)."`
	Until         string `help:"Only events delivered before this time (same forms as --since)."`
	Actor         string `help:"Who is acting, for the audit trail (default: the OS user)."`
	Reason        string `help:"Why, for the audit trail (required)."`
	DryRun        bool   `help:"Count the events and aggregates a replay would take, and change nothing."`
	Yes           bool   `help:"Replay without a dry run first: the events are delivered again."`
	JSON          bool   `name:"json" help:"Print the result as JSON."`
}

// Run replays.
func (c *EventsReplayCmd) Run(ctx context.Context, g *Globals) error {
	req, err := c.request(time.Now())
	if err != nil {
		return err
	}
	if g.Config != "" {
		return fmt.Errorf("%w: with --config, a replay acts on one destination's table: give --destination NAME", outbox.ErrInvalidConfig)
	}
	if !req.DryRun && !c.Yes {
		return fmt.Errorf("%w: a replay delivers the events again: count them first with --dry-run, then replay with --yes", outbox.ErrInvalidConfig)
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	res, err := b.store.Replay(ctx, req)
	if err != nil {
		return err
	}
	if err := store.RecordReplay(ctx, b.store, req, res); err != nil {
		return fmt.Errorf("the replay is done (%d events), but could not be noted in the audit log: %w", res.Events, err)
	}
	msg := "replay"
	if req.DryRun {
		msg = "replay dry run"
	}
	g.logger.Info(msg, "operator", req.Action.Actor, "reason", req.Action.Reason, "filter", req.Filter.String(),
		"table", g.Table, "events", res.Events, "aggregates", res.Aggregates, "held_aggregates", len(res.Held))
	if err := c.print(g, req, res); err != nil {
		return err
	}
	if len(res.Held) > 0 && !req.DryRun {
		return fmt.Errorf("%w: %d aggregates not replayed: an event of theirs is in flight, FAILED or BLOCKED (first: %s); replay them again once it is delivered, requeued or skipped",
			outbox.ErrConflict, len(res.Held), res.Held[0])
	}
	return nil
}

// request builds the store's request from the flags; relative times count
// back from now.
func (c *EventsReplayCmd) request(now time.Time) (store.ReplayRequest, error) {
	f := store.ReplayFilter{AggregateType: c.AggregateType, AggregateID: c.AggregateID, EventType: c.Type}
	var err error
	if f.Since, err = parseWhen("--since", c.Since, now); err != nil {
		return store.ReplayRequest{}, err
	}
	if f.Until, err = parseWhen("--until", c.Until, now); err != nil {
		return store.ReplayRequest{}, err
	}
	req := store.ReplayRequest{Filter: f, Action: store.OperatorAction{Actor: actorName(c.Actor), Reason: c.Reason}, DryRun: c.DryRun}
	switch {
	case f == store.ReplayFilter{}:
		return req, fmt.Errorf("%w: say which delivered events to replay: --aggregate-type (and --aggregate-id), --type, --since or --until", outbox.ErrInvalidConfig)
	case f.AggregateID != "" && f.AggregateType == "":
		return req, fmt.Errorf("%w: --aggregate-id %s needs its --aggregate-type", outbox.ErrInvalidConfig, f.AggregateID)
	case c.Reason == "":
		return req, fmt.Errorf("%w: give --reason: it goes in the audit row of every replayed event", outbox.ErrInvalidConfig)
	}
	return req, req.Validate()
}

// print writes the result as text or JSON.
func (c *EventsReplayCmd) print(g *Globals, req store.ReplayRequest, res store.ReplayResult) error {
	if c.JSON {
		held := make([]map[string]any, 0, len(res.Held))
		for _, h := range res.Held {
			held = append(held, map[string]any{"aggregate_type": h.AggregateType, "aggregate_id": h.AggregateID,
				"event_id": h.EventID.String(), "status": h.Status, "matched": h.Matched})
		}
		return json.NewEncoder(g.stdout).Encode(map[string]any{"dry_run": req.DryRun, "filter": req.Filter.String(),
			"operator": req.Action.Actor, "reason": req.Action.Reason, "events": res.Events, "aggregates": res.Aggregates, "held": held})
	}
	if req.DryRun {
		fmt.Fprintf(g.stdout, "%d events of %d aggregates would be replayed (%s); run again with --yes instead of --dry-run to replay them\n",
			res.Events, res.Aggregates, req.Filter)
	} else {
		fmt.Fprintf(g.stdout, "replayed %d events of %d aggregates (%s)\n", res.Events, res.Aggregates, req.Filter)
	}
	for _, h := range res.Held {
		fmt.Fprintf(g.stdout, "held: %s\n", h)
	}
	return nil
}
