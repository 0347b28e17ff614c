package main

import (
	"fmt"

	"github.com/txoutbox/outbox"
)

// destinationsFile handles `outbox relay --config FILE --check`: it reads
// and checks the destinations file and prints its plan and each
// destination's table (exit 0) or every problem (exit 1). It opens no
// database and no sink: the relay's start checks the event types already
// in the table against the routes.
func (c *RelayCmd) destinationsFile(g *Globals) error {
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
	fmt.Fprint(g.stdout, g.secrets.redact(cfg.Describe(nil)))
	fmt.Fprintf(g.stdout, "destination tables of outbox %s (create them with `outbox migrate --config %s`):\n", g.Table, g.Config)
	for _, d := range cfg.Destinations {
		fmt.Fprintf(g.stdout, "  %s: %s\n", d.Name, tables[d.Name])
	}
	fmt.Fprintf(g.stdout, "%s: the file is valid. The relay checks the event types already in the table when it starts.\n", g.Config)
	return nil
}
