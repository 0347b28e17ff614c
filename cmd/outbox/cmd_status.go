package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// StatusCmd prints counts by status, the oldest pending age and the
// aggregates held back by a FAILED event.
type StatusCmd struct {
	JSON      bool   `name:"json" help:"Print one JSON object keyed by status name."`
	OnFailure string `help:"The relays' failure policy (block or continue), to report blocked aggregates." default:"block" enum:"block,continue"`
	cdcNames
}

// Run prints the status.
func (c *StatusCmd) Run(ctx context.Context, g *Globals) error {
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	st, dueAge, err := readStatus(ctx, b.store, c.OnFailure == "block")
	if err != nil {
		return err
	}
	lag, hasSlot, err := slotLag(ctx, b.store, c.cdcNames.flags(), g.Table)
	if err != nil {
		return err
	}
	pos, hasPos, err := binlogPosition(ctx, b.store, g.Table)
	if err != nil {
		return err
	}
	dests, err := g.readDestinationStatus(ctx, c.OnFailure == "block")
	if err != nil {
		return err
	}
	history, err := b.store.HistoryMonths(ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		out := map[string]any{}
		months := []map[string]any{}
		for _, m := range history {
			months = append(months, historyMonthJSON(m))
		}
		out["history"] = months
		if hasPos {
			out["cdc_binlog_stream"] = pos.Slot
			out["cdc_binlog_position"] = pos.Position.String()
			out["cdc_binlog_file"] = pos.Position.File
			out["cdc_binlog_offset"] = pos.Position.Offset
			out["cdc_binlog_gtid_set"] = pos.Position.GTIDSet
			out["cdc_binlog_saved_at"] = pos.SavedAt
			out["cdc_binlog_holder"] = pos.Holder
			out["cdc_binlog_lag_bytes"] = pos.LagBytes
		}
		if hasSlot {
			out["cdc_slot"] = lag.Slot
			out["cdc_slot_active"] = lag.Active
			out["cdc_slot_lag_bytes"] = lag.Bytes
		}
		for _, s := range outbox.Statuses {
			out[string(s)] = st.Counts[s]
		}
		out["oldest_pending_seconds"] = st.OldestPendingAge.Seconds()
		out["oldest_due_pending_seconds"] = dueAge.Seconds()
		out["dead_letters"] = st.DeadLetters
		out["blocked_aggregates"] = st.BlockedAggregateCount
		blocked := []map[string]any{}
		for _, a := range st.BlockedAggregates {
			blocked = append(blocked, map[string]any{"aggregate_type": a.AggregateType, "aggregate_id": a.AggregateID,
				"failed_event_id": a.FailedEventID.String(), "waiting": a.Waiting})
		}
		out["blocked"] = blocked
		if dests != nil {
			byName := map[string]any{}
			for _, d := range dests {
				byName[d.name] = d.json()
			}
			out["destinations"] = byName
		}
		enc := json.NewEncoder(g.stdout)
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "table\t%s (%s)\n", g.Table, b.kind)
	for _, s := range outbox.Statuses {
		fmt.Fprintf(tw, "%s\t%d\n", s, st.Counts[s])
	}
	age := "-"
	if st.OldestPendingAge > 0 {
		age = st.OldestPendingAge.Round(time.Millisecond).String()
	}
	fmt.Fprintf(tw, "oldest pending\t%s\n", age)
	dueText := "-"
	if dueAge > 0 {
		dueText = dueAge.Round(time.Millisecond).String()
	}
	fmt.Fprintf(tw, "oldest due pending\t%s\n", dueText)
	fmt.Fprintf(tw, "dead letters\t%d\n", st.DeadLetters)
	fmt.Fprintf(tw, "blocked aggregates\t%d\n", st.BlockedAggregateCount)
	fmt.Fprintf(tw, "history\t%s\n", historySummary(history))
	if hasSlot {
		state := "idle"
		if lag.Active {
			state = "streaming"
		}
		fmt.Fprintf(tw, "cdc slot lag\t%d bytes (slot %s, %s)\n", lag.Bytes, lag.Slot, state)
	}
	if hasPos {
		state := "no relay reading"
		if pos.Holder != "" {
			state = "read by " + pos.Holder
		}
		lag := "unknown"
		if pos.LagBytes >= 0 {
			lag = fmt.Sprintf("%d bytes", pos.LagBytes)
		}
		fmt.Fprintf(tw, "cdc binlog position\t%s (stream %s, %s, saved %s, lag %s)\n", pos.Position, pos.Slot, state,
			pos.SavedAt.Format(time.RFC3339), lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, a := range st.BlockedAggregates {
		fmt.Fprintf(g.stdout, "  %s/%s: %d events wait behind FAILED event %s (outbox events retry|skip %s)\n",
			a.AggregateType, a.AggregateID, a.Waiting, a.FailedEventID, a.FailedEventID)
	}
	if dests != nil {
		fmt.Fprintf(g.stdout, "destinations (%s; each one's events: outbox status --config %s --destination NAME):\n", g.Config, g.Config)
		for _, d := range dests {
			fmt.Fprintf(g.stdout, "  %s\n", d.line())
		}
	}
	return nil
}

// readStatus reads every figure in one consistent snapshot (Store.Snapshot:
// the figures of the gauges). dueAge is the age of the oldest due PENDING
// event.
func readStatus(ctx context.Context, st store.Store, failedBlocks bool) (store.Stats, time.Duration, error) {
	snap, err := st.Snapshot(ctx, store.SnapshotRequest{FailedBlocks: failedBlocks, Full: true, BlockedLimit: 100})
	if err != nil {
		return store.Stats{}, 0, err
	}
	return store.Stats{
		Counts:                snap.Counts,
		OldestPendingAge:      snap.OldestPendingAge,
		BlockedAggregates:     snap.BlockedAggregates,
		BlockedAggregateCount: snap.BlockedAggregateCount,
		DeadLetters:           snap.DeadLetters,
	}, snap.OldestDuePendingAge, nil
}

// historySummary says how many months the history holds and their rows
// per month ("~" before the planner's estimates).
func historySummary(months []store.HistoryMonth) string {
	if len(months) == 0 {
		return "empty"
	}
	text := fmt.Sprintf("%d months:", len(months))
	for _, m := range months {
		approx := ""
		if m.Estimated {
			approx = "~"
		}
		text += fmt.Sprintf(" %s %s%d events", m.Label(), approx, m.Events)
	}
	return text
}
