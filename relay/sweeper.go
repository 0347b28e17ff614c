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
			n, err := r.cfg.Store.Purge(ctx, store.PurgeRequest{OlderThan: r.cfg.Retention,
				Statuses: []outbox.Status{outbox.StatusProcessed, outbox.StatusExpired}})
			r.stats.purged.Add(n)
			if err != nil && ctx.Err() == nil {
				r.hooks.storeError(OpPurge, err)
				r.log.Warn("retention purge failed", "err", err)
			} else if n > 0 {
				r.log.Info("retention purge", "deleted", n, "older_than", r.cfg.Retention)
			}
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
