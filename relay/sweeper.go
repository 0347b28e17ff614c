package relay

import (
	"context"
	"time"

	"github.com/txoutbox/outbox/store"
)

// purgeEvery is how often the move into history runs, at most.
const purgeEvery = time.Minute

// historyRetentionEvery is how often the history's retention runs, at
// most: it drops whole months, so once an hour is soon enough.
const historyRetentionEvery = time.Hour

func (r *Relay) sweepLoop(ctx context.Context) {
	r.logRetention(ctx)
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	var lastPurge, lastHistoryRetention time.Time
	for {
		if _, err := r.sweepOnce(ctx); err != nil && ctx.Err() == nil {
			r.stats.sweepErrors.Add(1)
			r.hooks.storeError(OpSweep, err)
			r.log.Warn("sweep failed", "err", err)
		}
		if r.cfg.Retention > 0 && r.now().Sub(lastPurge) >= purgeEvery {
			lastPurge = r.now()
			r.purgeOnce(ctx)
		}
		if r.cfg.HistoryKeepDays > 0 && r.now().Sub(lastHistoryRetention) >= historyRetentionEvery {
			lastHistoryRetention = r.now()
			r.historyRetentionOnce(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Relay) sweepOnce(ctx context.Context) (store.SweepResult, error) {
	started := r.now()
	res, err := r.cfg.Store.Sweep(ctx, store.SweepRequest{RelayID: r.cfg.RelayID, FailedBlocks: r.failedBlocks()})
	r.hooks.swept(started, res, err)
	r.stats.reaped.Add(res.Reaped)
	r.stats.sweptExpired.Add(res.Expired)
	r.stats.blocked.Add(res.Blocked)
	r.stats.unblocked.Add(res.Unblocked)
	if res.Reaped > 0 {
		r.log.Warn("reaper returned events whose lease ended to PENDING (a relay stopped without finishing them)", "events", res.Reaped)
	}
	if res.Expired > 0 {
		r.log.Info("expired waiting events past their deadline", "events", res.Expired)
	}
	if res.Blocked > 0 {
		r.log.Warn("events wait behind a FAILED event of their aggregate (BLOCKED)", "events", res.Blocked)
	}
	return res, err
}

// purgeOnce moves the events finished longer than the retention ago
// (PROCESSED, EXPIRED, SKIPPED) into the history, and on an adopted table
// only those that finished after the adoption unless Config.PurgeAdopted.
func (r *Relay) purgeOnce(ctx context.Context) {
	n, err := r.cfg.Store.MoveToHistory(ctx, store.HistoryMoveRequest{OlderThan: r.cfg.Retention, Adopted: r.cfg.PurgeAdopted})
	r.stats.purged.Add(n)
	switch {
	case err != nil && ctx.Err() == nil:
		r.hooks.storeError(OpPurge, err)
		r.log.Warn("move into history failed", "err", err)
	case err != nil:
	case n > 0:
		r.log.Info("moved finished events into history", "events", n, "older_than", r.cfg.Retention)
	default:
		r.log.Debug("moved finished events into history", "events", 0, "older_than", r.cfg.Retention)
	}
}

// historyRetentionOnce drops the months of history that ended more than
// Config.HistoryKeepDays ago, whole, and logs each with its rows.
func (r *Relay) historyRetentionOnce(ctx context.Context) {
	cutoff, err := store.RetentionCutoff(r.now(), r.cfg.HistoryKeepDays)
	if err != nil {
		r.log.Warn("history retention", "err", err)
		return
	}
	drop, err := r.cfg.Store.DropHistoryBefore(ctx, cutoff)
	for _, m := range drop.Months {
		r.log.Warn("history retention dropped a month of history", "month", m.Label(), "events", m.Events, "attempts", m.Attempts,
			"keep_days", r.cfg.HistoryKeepDays)
	}
	if nerr := store.RecordHistoryDrop(ctx, r.cfg.Store, drop, "relay:"+r.cfg.RelayID); nerr != nil && ctx.Err() == nil {
		r.log.Warn("could not note the history retention in the audit log: the audit chain's verifier will count the dropped months as deleted by hand", "err", nerr)
	}
	if err != nil && ctx.Err() == nil {
		r.hooks.storeError(OpPurge, err)
		r.log.Warn("history retention failed", "err", err)
	}
}

// logRetention says at start what the move into history takes and what
// it leaves: on a table that outbox adopted, the rows that finished
// before the adoption stay unless Config.PurgeAdopted.
func (r *Relay) logRetention(ctx context.Context) {
	if r.cfg.HistoryKeepDays > 0 {
		r.log.Info("history retention drops the months of history that ended this many days ago, whole", "keep_days", r.cfg.HistoryKeepDays)
	} else {
		r.log.Info("history retention off: the history is kept forever")
	}
	if r.cfg.Retention <= 0 {
		r.log.Info("retention off: finished events stay in the hot table")
		return
	}
	const kept = "FAILED events and their dead letters stay"
	ar := r.cfg.Store.Features().AdoptionReporter
	if ar == nil {
		r.log.Info("finished events move into history this long after they finished; "+kept, "retention", r.cfg.Retention)
		return
	}
	at, adopted, err := ar.AdoptedAt(ctx)
	switch {
	case err != nil:
		r.log.Warn("retention: cannot read whether outbox adopted the table; each move reads it again and moves nothing until it can", "retention", r.cfg.Retention, "err", err)
	case !adopted:
		r.log.Info("finished events move into history this long after they finished; "+kept, "retention", r.cfg.Retention)
	case r.cfg.PurgeAdopted:
		r.log.Warn("finished events move into history this long after they finished, including the rows the table held before its adoption (--purge-adopted); "+kept,
			"retention", r.cfg.Retention, "adopted_at", at.UTC())
	default:
		r.log.Info("finished events move into history this long after the relay finished them; the rows that finished before the table's adoption stay in the hot table (--purge-adopted moves those too); "+kept,
			"retention", r.cfg.Retention, "adopted_at", at.UTC())
	}
}
