package main

import (
	"errors"
	"fmt"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/destconfig"
)

// destinationsFile handles `outbox relay --config FILE`: with --check it
// reads and checks the destinations file and prints its plan (exit 0) or
// every problem (exit 1). Without --check it refuses: the relay cannot
// deliver to the destinations of a file yet.
//
// The check does not read the table: no store query lists the
// (event_type, aggregate_type) pairs of a table yet, so the plan shows
// the routes only.
func (c *RelayCmd) destinationsFile(g *Globals) error {
	switch {
	case c.Config == "":
		return fmt.Errorf("%w: --check checks a destinations file: give it with --config FILE (see docs/DESTINATIONS.md)", outbox.ErrInvalidConfig)
	case !c.Check:
		return fmt.Errorf("%w: --config %s: delivery to the destinations of a file (fan-out) is not available yet; "+
			"check the file with --config %s --check, and deliver with --sink URL, one relay per sink (see docs/DESTINATIONS.md)",
			outbox.ErrInvalidConfig, c.Config, c.Config)
	}
	cfg, err := destconfig.Load(c.Config)
	if err != nil {
		fmt.Fprintln(g.stderr, g.secrets.redact(err.Error()))
		var fe *destconfig.Error
		if errors.As(err, &fe) {
			return &exitError{code: 1, err: fmt.Errorf("destinations file %s refused: %d problem(s) to fix, listed above", c.Config, len(fe.Problems))}
		}
		return &exitError{code: 1, err: fmt.Errorf("destinations file %s could not be read", c.Config)}
	}
	fmt.Fprint(g.stdout, g.secrets.redact(cfg.Describe(nil)))
	fmt.Fprintf(g.stdout, "%s: the file is valid. The event types already in the table are not checked yet; "+
		"fan-out delivery to these destinations is not available yet: deliver with --sink.\n", c.Config)
	return nil
}
