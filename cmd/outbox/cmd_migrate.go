package main

import (
	"context"
	"fmt"

	"github.com/txoutbox/outbox"
)

// MigrateCmd applies (or reverts) the schema migrations.
type MigrateCmd struct {
	Down   bool `help:"Revert every migration: DROPS the outbox, dead-letter and attempts tables (and, on PostgreSQL, the slot and publication of --source logical)." env:"-"`
	Yes    bool `help:"Confirm --down." env:"-"`
	Status bool `help:"Only print the applied and latest versions."`
	cdcNames
}

// Run applies the migrations.
func (c *MigrateCmd) Run(ctx context.Context, g *Globals) error {
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	switch {
	case c.Status:
		cur, latest, err := b.store.MigrationVersion(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "%s: schema version %d of %d\n", g.Table, cur, latest)
		return nil
	case c.Down:
		if !c.Yes {
			return fmt.Errorf("%w: migrate --down drops table %s and its dead letters and audit trail; add --yes to confirm", outbox.ErrInvalidConfig, g.Table)
		}
		if err := dropLogical(ctx, b, c.cdcNames.flags(), g.Table); err != nil {
			return err
		}
		if err := b.store.MigrateDown(ctx); err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "%s: dropped\n", g.Table)
		return nil
	}
	applied, err := b.store.MigrateUp(ctx)
	if err != nil {
		return err
	}
	cur, _, err := b.store.MigrationVersion(ctx)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(g.stdout, "%s: up to date (schema version %d)\n", g.Table, cur)
	} else {
		fmt.Fprintf(g.stdout, "%s: applied migrations %v (schema version %d)\n", g.Table, applied, cur)
	}
	return nil
}
