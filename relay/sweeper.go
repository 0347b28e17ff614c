package relay

import (
	"context"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// purgeEvery is how often retention runs, at most.
const purgeEvery = time.Minute

func (r *Relay) sweepLoop(ctx context.Context) {
	r.logRetention(ctx)
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	var lastPurge time.Time
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

// purgeOnce runs retention once: PROCESSED and EXPIRED events past it,
// and on an adopted table only those that finished after the adoption
// unless Config.PurgeAdopted.
func (r *Relay) purgeOnce(ctx context.Context) {
	n, err := r.cfg.Store.Purge(ctx, store.PurgeRequest{OlderThan: r.cfg.Retention,
		Statuses: []outbox.Status{outbox.StatusProcessed, outbox.StatusExpired}, Adopted: r.cfg.PurgeAdopted})
	r.stats.purged.Add(n)
	switch {
	case err != nil && ctx.Err() == nil:
		r.hooks.storeError(OpPurge, err)
		r.log.Warn("retention purge failed", "err", err)
	case err != nil:
	case n > 0:
		r.log.Info("retention purge", "deleted", n, "older_than", r.cfg.Retention)
		if err := store.RecordRetention(ctx, r.cfg.Store, r.cfg.Retention, n, "relay:"+r.cfg.RelayID,
			"PROCESSED and EXPIRED events and their attempts and dead letters"); err != nil && ctx.Err() == nil {
			r.log.Warn("could not note the retention purge in the audit log: the audit chain's verifier will count the deleted attempts as deleted by hand", "err", err)
		}
	default:
		r.log.Debug("retention purge", "deleted", 0, "older_than", r.cfg.Retention)
	}
}

// logRetention says at start what retention will delete and what it
// keeps: on a table that outbox adopted, the rows that finished before
// the adoption are kept unless Config.PurgeAdopted.
func (r *Relay) logRetention(ctx context.Context) {
	if r.cfg.Retention <= 0 {
		r.log.Info("retention off: the relay deletes no event")
		return
	}
	const kept = "FAILED and SKIPPED events and their dead letters are kept"
	ar := r.cfg.Store.Features().AdoptionReporter
	if ar == nil {
		r.log.Info("retention deletes PROCESSED and EXPIRED events this long after they finished; "+kept, "retention", r.cfg.Retention)
		return
	}
	at, adopted, err := ar.AdoptedAt(ctx)
	switch {
	case err != nil:
		r.log.Warn("retention: cannot read whether outbox adopted the table; each purge reads it again and deletes nothing until it can", "retention", r.cfg.Retention, "err", err)
	case !adopted:
		r.log.Info("retention deletes PROCESSED and EXPIRED events this long after they finished; "+kept, "retention", r.cfg.Retention)
	case r.cfg.PurgeAdopted:
		r.log.Warn("retention deletes PROCESSED and EXPIRED events this long after they finished, including the rows the table held before its adoption (--purge-adopted); "+kept,
			"retention", r.cfg.Retention, "adopted_at", at.UTC())
	default:
		r.log.Info("retention deletes PROCESSED and EXPIRED events this long after the relay finished them; it keeps every row that finished before the table's adoption (--purge-adopted deletes those too); "+kept,
			"retention", r.cfg.Retention, "adopted_at", at.UTC())
	}
}
