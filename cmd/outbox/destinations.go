package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/destconfig"
	"github.com/txoutbox/outbox/store"
)

// The global --config FILE names a destinations file: `outbox relay`
// delivers to its destinations, `outbox migrate` creates their tables,
// `outbox status` and `outbox events show` report each destination. With
// --destination NAME, status, events, routes and audit act on that destination's
// table instead of the outbox table (retry or skip an event at one
// destination, read its breakers).

// destinationCommands are the commands --destination goes with.
var destinationCommands = []string{"status", "events", "routes", "audit"}

// selectDestination points g.Table at the table of --destination, for the
// commands that act on one table; command is the parsed command line
// ("events retry <event-id>").
func (g *Globals) selectDestination(command string) error {
	if g.Destination == "" {
		return nil
	}
	name, _, _ := strings.Cut(command, " ")
	switch {
	case !slices.Contains(destinationCommands, name):
		return fmt.Errorf("%w: --destination goes with %s, not with %s (unset OUTBOX_DESTINATION)", outbox.ErrInvalidConfig,
			strings.Join(destinationCommands, ", "), name)
	case g.Config == "":
		return fmt.Errorf("%w: --destination %s needs the destinations file that defines it: give --config FILE (or OUTBOX_CONFIG)", outbox.ErrInvalidConfig, g.Destination)
	}
	cfg, err := destconfig.Load(g.Config)
	if err != nil {
		return err
	}
	tables, err := cfg.Tables(g.Table)
	if err != nil {
		return err
	}
	table, ok := tables[g.Destination]
	if !ok {
		names := make([]string, 0, len(cfg.Destinations))
		for _, d := range cfg.Destinations {
			names = append(names, d.Name)
		}
		return fmt.Errorf("%w: --destination %s is not a destination of %s (it defines %s)", outbox.ErrInvalidConfig,
			g.Destination, g.Config, strings.Join(names, ", "))
	}
	g.Table = table
	g.Config = "" // the command acts on that one table
	return nil
}

// destTables lists the destinations' tables in the file's order.
func destTables(cfg *destconfig.Config, tables map[string]string) []string {
	out := make([]string, 0, len(cfg.Destinations))
	for _, d := range cfg.Destinations {
		out = append(out, tables[d.Name])
	}
	return out
}

// destinationTables reads --config for the commands that report every
// destination: the file and each destination's table, or nil without
// --config.
func (g *Globals) destinationTables() (*destconfig.Config, map[string]string, error) {
	if g.Config == "" {
		return nil, nil, nil
	}
	cfg, err := destconfig.Load(g.Config)
	if err != nil {
		return nil, nil, err
	}
	tables, err := cfg.Tables(g.Table)
	if err != nil {
		return nil, nil, err
	}
	return cfg, tables, nil
}

// destinationStatus is one destination's figures for `outbox status`.
type destinationStatus struct {
	name, table string
	st          store.Stats
	dueAge      time.Duration
}

// readDestinationStatus reads the figures of each destination of --config.
func (g *Globals) readDestinationStatus(ctx context.Context, failedBlocks bool) ([]destinationStatus, error) {
	cfg, tables, err := g.destinationTables()
	if err != nil || cfg == nil {
		return nil, err
	}
	out := make([]destinationStatus, 0, len(cfg.Destinations))
	for _, d := range cfg.Destinations {
		b, err := openBackend(ctx, g.DB, tables[d.Name], outbox.Limits{}, g.logger)
		if err != nil {
			return nil, err
		}
		st, dueAge, err := readStatus(ctx, b.store, failedBlocks)
		b.close()
		if err != nil {
			return nil, fmt.Errorf("destination %s (table %s): %w (create its table with `outbox migrate --config %s`)", d.Name, tables[d.Name], err, g.Config)
		}
		out = append(out, destinationStatus{name: d.Name, table: tables[d.Name], st: st, dueAge: dueAge})
	}
	return out, nil
}

// json is the destination's figures as `outbox status --json` prints them.
func (d destinationStatus) json() map[string]any {
	m := map[string]any{"table": d.table}
	for _, s := range outbox.Statuses {
		m[string(s)] = d.st.Counts[s]
	}
	m["oldest_pending_seconds"] = d.st.OldestPendingAge.Seconds()
	m["oldest_due_pending_seconds"] = d.dueAge.Seconds()
	m["dead_letters"] = d.st.DeadLetters
	m["blocked_aggregates"] = d.st.BlockedAggregateCount
	return m
}

// line is the destination's figures on one line of `outbox status`.
func (d destinationStatus) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s):", d.name, d.table)
	for _, s := range outbox.Statuses {
		if n := d.st.Counts[s]; n > 0 || s == outbox.StatusPending || s == outbox.StatusProcessed || s == outbox.StatusFailed {
			fmt.Fprintf(&b, " %s %d", s, n)
		}
	}
	fmt.Fprintf(&b, ", dead letters %d, blocked aggregates %d", d.st.DeadLetters, d.st.BlockedAggregateCount)
	if d.st.OldestPendingAge > 0 {
		fmt.Fprintf(&b, ", oldest pending %s", d.st.OldestPendingAge.Round(time.Millisecond))
	}
	return b.String()
}

// showAtDestinations prints an event of the outbox table, then its
// delivery at each destination of --config: the copy in the
// destination's table (the same event id) and its attempts, or that it
// is not there.
func (c *EventsShowCmd) showAtDestinations(ctx context.Context, g *Globals, outboxStore store.Store, id outbox.EventID) error {
	cfg, tables, err := g.destinationTables()
	if err != nil {
		return err
	}
	r, err := outboxStore.GetEvent(ctx, id)
	if err != nil {
		return err
	}
	atts, err := outboxStore.Attempts(ctx, id)
	if err != nil {
		return err
	}
	type atDestination struct {
		name, table string
		r           *store.Record
		atts        []store.Attempt
	}
	var at []atDestination
	for _, d := range cfg.Destinations {
		b, err := openBackend(ctx, g.DB, tables[d.Name], outbox.Limits{}, g.logger)
		if err != nil {
			return err
		}
		one := atDestination{name: d.Name, table: tables[d.Name]}
		dr, err := b.store.GetEvent(ctx, id)
		if err == nil {
			one.r = &dr
			one.atts, err = b.store.Attempts(ctx, id)
		} else if errors.Is(err, outbox.ErrNotFound) {
			err = nil
		}
		b.close()
		if err != nil {
			return fmt.Errorf("destination %s (table %s): %w", d.Name, tables[d.Name], err)
		}
		at = append(at, one)
	}
	route, routed := cfg.Resolve(r.EventType, r.AggregateType)
	delivered := 0
	for _, d := range at {
		if d.r != nil && d.r.Status == outbox.StatusProcessed && slices.Contains(route, d.name) {
			delivered++
		}
	}
	everywhere := routed && r.Status == outbox.StatusProcessed && delivered == len(route)
	if c.JSON {
		m := withSealedInfo(ctx, outboxStore, r, eventJSON(r, atts))
		m["route"] = route
		m["delivered_everywhere"] = everywhere
		byName := map[string]any{}
		for _, d := range at {
			if d.r == nil {
				byName[d.name] = map[string]any{"table": d.table, "status": nil}
				continue
			}
			dm := withSealedInfo(ctx, outboxStore, *d.r, eventJSON(*d.r, d.atts))
			dm["table"] = d.table
			byName[d.name] = dm
		}
		m["destinations"] = byName
		return json.NewEncoder(g.stdout).Encode(m)
	}
	if err := printEvent(ctx, g.stdout, r, atts, outboxStore); err != nil {
		return err
	}
	switch {
	case !routed:
		fmt.Fprintf(g.stdout, "\nno route of %s matches this event's types: it goes nowhere (FAILED once a relay with the file claims it)\n", g.Config)
	case everywhere:
		fmt.Fprintf(g.stdout, "\ndelivered at every destination of its route (%s)\n", strings.Join(route, ", "))
	default:
		fmt.Fprintf(g.stdout, "\ndelivered at %d of the %d destinations of its route (%s)\n", delivered, len(route), strings.Join(route, ", "))
	}
	for _, d := range at {
		fmt.Fprintf(g.stdout, "\nat destination %s (table %s):\n", d.name, d.table)
		if d.r == nil {
			fmt.Fprintln(g.stdout, "  not there: its route does not name this destination, or the event is not routed yet")
			continue
		}
		var buf strings.Builder
		if err := printEvent(ctx, &buf, *d.r, d.atts, outboxStore); err != nil {
			return err
		}
		for line := range strings.Lines(buf.String()) {
			fmt.Fprint(g.stdout, "  "+line)
		}
	}
	return nil
}
