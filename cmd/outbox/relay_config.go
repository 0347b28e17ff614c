package main

import (
	"context"
	"fmt"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/destconfig"
)

// destinationsFile handles `outbox relay --config FILE --check`: it reads
// and checks the destinations file and prints its plan and each
// destination's table (exit 0) or every problem (exit 1). With --db it
// also reads the (event_type, aggregate_type) pairs of the table's
// unfinished events, prints where each goes, and refuses the pairs no
// route matches, as the relay's start does; without --db it opens no
// database. It never opens a sink.
func (c *RelayCmd) destinationsFile(ctx context.Context, g *Globals) error {
	if g.Config == "" {
		return fmt.Errorf("%w: --check checks a destinations file: give it with --config FILE (see docs/DESTINATIONS.md)", outbox.ErrInvalidConfig)
	}
	cfg, err := c.loadDestinations(g)
	if err != nil {
		return err
	}
	tables, err := cfg.Tables(g.Table)
	if err != nil {
		return fileRefused(g, g.Config, err)
	}
	var pairs []destconfig.TypePair
	if g.DB != "" {
		b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
		if err != nil {
			return err
		}
		defer b.close()
		types, err := b.store.EventTypes(ctx)
		if err != nil {
			return fmt.Errorf("reading the event types of table %s: %w", g.Table, err)
		}
		for _, t := range types {
			pairs = append(pairs, destconfig.TypePair{EventType: t.EventType, AggregateType: t.AggregateType})
		}
	}
	fmt.Fprint(g.stdout, g.secrets.redact(cfg.Describe(pairs)))
	fmt.Fprintf(g.stdout, "destination tables of outbox %s (create them with `outbox migrate --config %s`):\n", g.Table, g.Config)
	for _, d := range cfg.Destinations {
		fmt.Fprintf(g.stdout, "  %s: %s\n", d.Name, tables[d.Name])
	}
	if g.DB == "" {
		fmt.Fprintf(g.stdout, "%s: the file is valid. Give --db to check the event types already in the table too; the relay checks them when it starts.\n", g.Config)
		return nil
	}
	if err := cfg.CheckTypes(pairs); err != nil {
		return fileRefused(g, g.Config, err)
	}
	fmt.Fprintf(g.stdout, "%s: the file is valid, and routes every event type of the unfinished events of table %s.\n", g.Config, g.Table)
	return nil
}
