package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/destconfig"
	"github.com/txoutbox/outbox/store"
)

// MigrateCmd applies (or reverts) the schema migrations, adopts a table the
// team already has, checks the schema, or prints the SQL it would run.
type MigrateCmd struct {
	Down          bool   `help:"Revert every migration: DROPS the outbox, dead-letter and attempts tables (on an adopted table: removes only what adoption added; on PostgreSQL also the slot and publication of --source logical, on MySQL the position and lease tables of --source binlog)." env:"-"`
	Yes           bool   `help:"Confirm --down." env:"-"`
	Status        bool   `help:"Only print the applied and latest versions." env:"-"`
	Check         bool   `help:"Exit non-zero, with the reason, unless the schema exists, is outbox's and is up to date." env:"-"`
	Adopt         bool   `help:"Upgrade an existing table of that name (the team's own outbox) in place, keeping its rows." env:"-"`
	AggregateType string `help:"With --adopt: the aggregate_type of the existing rows, and the column's default." placeholder:"TYPE" env:"-"`
	DryRun        bool   `help:"Print the exact SQL that would run (migrate, --adopt or --down) and change nothing." env:"-"`
	cdcNames
}

// Run applies the migrations.
func (c *MigrateCmd) Run(ctx context.Context, g *Globals) error {
	if err := c.validate(g); err != nil {
		return err
	}
	if g.Config != "" {
		return c.withDestinations(ctx, g)
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	sm := b.store
	switch {
	case c.Status:
		cur, latest, err := b.store.MigrationVersion(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "%s: schema version %d of %d\n", g.Table, cur, latest)
		return nil
	case c.Check:
		return c.check(ctx, g, sm)
	case c.Adopt:
		return c.adopt(ctx, g, sm)
	case c.Down:
		return c.down(ctx, g, b, sm)
	}
	if c.DryRun {
		plan, err := sm.PlanMigrateUp(ctx)
		if err != nil {
			return err
		}
		if len(plan) == 0 {
			fmt.Fprintf(g.stdout, "-- %s: up to date, nothing to run\n", g.Table)
		}
		printSQL(g.stdout, plan)
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

func (c *MigrateCmd) validate(g *Globals) error {
	modes := 0
	for _, on := range []bool{c.Status, c.Check, c.Adopt, c.Down} {
		if on {
			modes++
		}
	}
	switch {
	case modes > 1:
		return fmt.Errorf("%w: --status, --check, --adopt and --down exclude each other: give one", outbox.ErrInvalidConfig)
	case c.AggregateType != "" && !c.Adopt:
		return fmt.Errorf("%w: --aggregate-type goes with --adopt", outbox.ErrInvalidConfig)
	case c.DryRun && (c.Status || c.Check):
		return fmt.Errorf("%w: --dry-run goes with migrate, --adopt or --down", outbox.ErrInvalidConfig)
	case g.Config != "" && (c.Adopt || c.Down):
		return fmt.Errorf("%w: --config (or OUTBOX_CONFIG) goes with migrate, --dry-run, --status or --check; adopt or drop one table at a time with --table, without --config", outbox.ErrInvalidConfig)
	}
	return nil
}

func (c *MigrateCmd) check(ctx context.Context, g *Globals, sm store.Store) error {
	sc, err := sm.InspectSchema(ctx)
	if err != nil {
		return err
	}
	if p := sc.Problem(); p != "" {
		return &exitError{code: 1, err: fmt.Errorf("migrate --check: %s", p)}
	}
	adopted := ""
	if sc.Adopted {
		adopted = ", adopted"
	}
	fmt.Fprintf(g.stdout, "%s: OK (schema version %d of %d%s)\n", g.Table, sc.Current, sc.Latest, adopted)
	return nil
}

func (c *MigrateCmd) adopt(ctx context.Context, g *Globals, sm store.Store) error {
	res, err := sm.Adopt(ctx, store.AdoptOptions{AggregateType: c.AggregateType, DryRun: c.DryRun})
	if err != nil {
		return err
	}
	if c.DryRun {
		fmt.Fprintf(g.stdout, "-- %s: adoption would keep its %d rows (%d PROCESSING set to PENDING, audited; %d FAILED kept as dead letters) and run:\n",
			g.Table, res.Rows, res.Requeued, res.DeadLettered)
		printSQL(g.stdout, res.SQL)
		return nil
	}
	if res.AlreadyAdopted {
		fmt.Fprintf(g.stdout, "%s: already adopted; later migrations applied %v\n", g.Table, res.Applied)
		return nil
	}
	fmt.Fprintf(g.stdout, "%s: adopted: %d rows kept, %d PROCESSING set to PENDING (audited), %d FAILED kept as dead letters; later migrations applied %v\n",
		g.Table, res.Rows, res.Requeued, res.DeadLettered, res.Applied)
	fmt.Fprintf(g.stdout, "note: the relay's retention moves into the history only events that finish from now on; the %d rows that had finished before the adoption are kept (outbox relay --purge-adopted moves them too once past --retention)\n", res.Finished+res.DeadLettered)
	return nil
}

func (c *MigrateCmd) down(ctx context.Context, g *Globals, b *backend, sm store.Store) error {
	sc, err := sm.InspectSchema(ctx)
	if err != nil {
		return err
	}
	plan, err := sm.PlanMigrateDown(ctx) // refuses a foreign table
	if err != nil {
		return err
	}
	if c.DryRun {
		printSQL(g.stdout, plan)
		return nil
	}
	if !c.Yes {
		return downRefusal(g.Table, sc.Adopted, sc.Unfinished)
	}
	if err := dropLogical(ctx, b, c.cdcNames.flags(), g.Table); err != nil {
		return err
	}
	if err := dropBinlog(ctx, b, g.Table); err != nil {
		return err
	}
	if err := b.store.MigrateDown(ctx); err != nil {
		return err
	}
	events, _, were := unfinishedWords(sc.Unfinished)
	if sc.Adopted {
		fmt.Fprintf(g.stdout, "%s: adoption removed; the table and its rows are kept (%d %s unfinished)\n", g.Table, sc.Unfinished, were)
		return nil
	}
	fmt.Fprintf(g.stdout, "%s: dropped (%d unfinished %s)\n", g.Table, sc.Unfinished, events)
	return nil
}

// downRefusal is the error of migrate --down without --yes: what it would
// remove, with the count of unfinished events.
func downRefusal(table string, adopted bool, unfinished int64) error {
	events, eventsAre, _ := unfinishedWords(unfinished)
	if adopted {
		return fmt.Errorf("%w: migrate --down on adopted table %s removes what adoption added (its columns, indexes, the dead letters and the audit trail) and keeps the team's rows and columns; %d %s unfinished; add --yes to confirm (--dry-run prints the SQL)",
			outbox.ErrInvalidConfig, table, unfinished, eventsAre)
	}
	return fmt.Errorf("%w: migrate --down drops table %s, which holds %d unfinished %s (PENDING, PROCESSING, BLOCKED or FAILED), and its dead letters and audit trail; add --yes to confirm (--dry-run prints the SQL)",
		outbox.ErrInvalidConfig, table, unfinished, events)
}

// unfinishedWords are the words that follow a count of n events: "event",
// "event is" and "was" for 1; "events", "events are" and "were" otherwise.
func unfinishedWords(n int64) (events, eventsAre, were string) {
	if n == 1 {
		return "event", "event is", "was"
	}
	return "events", "events are", "were"
}

// printSQL writes statements as a script: each ends with ";".
func printSQL(w io.Writer, stmts []string) {
	for _, s := range stmts {
		s = strings.TrimSpace(s)
		if !strings.HasSuffix(s, ";") && !(strings.HasPrefix(s, "--") && !strings.Contains(s, "\n")) {
			s += ";"
		}
		fmt.Fprintf(w, "%s\n\n", s)
	}
}

// withDestinations runs the command on the outbox table, then on the
// table of each destination of the --config file, in the file's order.
func (c *MigrateCmd) withDestinations(ctx context.Context, g *Globals) error {
	cfg, err := destconfig.Load(g.Config)
	if err != nil {
		return fileRefused(g, g.Config, err)
	}
	tables, err := cfg.Tables(g.Table)
	if err != nil {
		return fileRefused(g, g.Config, err)
	}
	for i, table := range append([]string{g.Table}, destTables(cfg, tables)...) {
		gd := *g
		gd.Config, gd.Table = "", table
		if err := c.Run(ctx, &gd); err != nil {
			if i == 0 {
				return err
			}
			d := cfg.Destinations[i-1]
			return fmt.Errorf("destination %s: %w", d.Name, err)
		}
	}
	return nil
}
