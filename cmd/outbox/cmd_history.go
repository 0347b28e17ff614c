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

// HistoryCmd groups the history's commands (docs/HISTORY.md).
type HistoryCmd struct {
	Move      HistoryMoveCmd      `cmd:"" help:"Move finished events (PROCESSED, EXPIRED, SKIPPED) older than an age, with their attempts, into the history."`
	Months    HistoryMonthsCmd    `cmd:"" help:"List the months the history holds, with their rows."`
	Retention HistoryRetentionCmd `cmd:"" help:"Drop the months of history that ended more than --keep-days ago, whole (audited)."`
}

// HistoryMoveCmd runs the relay's move into history by hand.
type HistoryMoveCmd struct {
	OlderThan time.Duration `help:"Move the events that finished longer ago than this (the relay's --retention). An event id can be enqueued again once its event moved." default:"168h"`
	BatchSize int           `help:"Events per transaction." default:"1000"`
	Adopted   bool          `help:"On an adopted table, also move the rows that had finished before the adoption (kept in the hot table by default)."`
}

// Run moves, printing the progress.
func (c *HistoryMoveCmd) Run(ctx context.Context, g *Globals) error {
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	var moved int64
	last := time.Now()
	n, err := b.store.MoveToHistory(ctx, store.HistoryMoveRequest{OlderThan: c.OlderThan, BatchSize: c.BatchSize, Adopted: c.Adopted,
		Progress: func(batch int64) {
			moved += batch
			if time.Since(last) >= time.Second {
				last = time.Now()
				fmt.Fprintf(g.stdout, "moved %d events so far\n", moved)
			}
		}})
	if err != nil {
		return fmt.Errorf("after %d events moved: %w", n, err)
	}
	fmt.Fprintf(g.stdout, "moved %d events into history\n", n)
	return nil
}

// HistoryMonthsCmd lists the history's months.
type HistoryMonthsCmd struct {
	JSON bool `name:"json" help:"Print JSON lines."`
}

// Run lists the months.
func (c *HistoryMonthsCmd) Run(ctx context.Context, g *Globals) error {
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	months, err := b.store.HistoryMonths(ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(g.stdout)
		for _, m := range months {
			if err := enc.Encode(historyMonthJSON(m)); err != nil {
				return err
			}
		}
		return nil
	}
	return printHistoryMonths(g, months)
}

func historyMonthJSON(m store.HistoryMonth) map[string]any {
	return map[string]any{"month": m.Label(), "events": m.Events, "attempts": m.Attempts, "estimated": m.Estimated}
}

func printHistoryMonths(g *Globals, months []store.HistoryMonth) error {
	if len(months) == 0 {
		fmt.Fprintln(g.stdout, "the history holds no month")
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MONTH\tEVENTS\tATTEMPTS")
	for _, m := range months {
		approx := ""
		if m.Estimated {
			approx = "~"
		}
		fmt.Fprintf(tw, "%s\t%s%d\t%s%d\n", m.Label(), approx, m.Events, approx, m.Attempts)
	}
	return tw.Flush()
}

// HistoryRetentionCmd drops the months past a retention.
type HistoryRetentionCmd struct {
	KeepDays int  `name:"keep-days" help:"Days of history to keep: the months that ended longer ago than this are dropped, whole." required:""`
	DryRun   bool `name:"dry-run" help:"Print the months that would be dropped; drop nothing."`
}

// Run drops, or with --dry-run lists, the months past the retention.
func (c *HistoryRetentionCmd) Run(ctx context.Context, g *Globals) error {
	cutoff, err := store.RetentionCutoff(time.Now(), c.KeepDays)
	if err != nil {
		return fmt.Errorf("--keep-days: %w", err)
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	if c.DryRun {
		months, err := b.store.HistoryMonths(ctx)
		if err != nil {
			return err
		}
		doomed := store.MonthsBefore(months, cutoff)
		fmt.Fprintf(g.stdout, "dry run: %d months end before %s and would be dropped\n", len(doomed), cutoff.UTC().Format(time.RFC3339))
		return printHistoryMonths(g, doomed)
	}
	drop, err := b.store.DropHistoryBefore(ctx, cutoff)
	for _, m := range drop.Months {
		g.logger.Warn("history retention dropped a month of history", "month", m.Label(), "events", m.Events, "attempts", m.Attempts,
			"keep_days", c.KeepDays)
	}
	if nerr := store.RecordHistoryDrop(ctx, b.store, drop, "operator:"+actorName("")); nerr != nil {
		return fmt.Errorf("dropped %d months, but could not note it in the audit log (outbox audit verify will count them as deleted by hand): %w", len(drop.Months), nerr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "dropped %d months (%d events) that ended before %s\n", len(drop.Months), drop.Events(), cutoff.UTC().Format(time.RFC3339))
	return printHistoryMonths(g, drop.Months)
}
