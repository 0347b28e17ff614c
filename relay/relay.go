// Package relay delivers committed outbox events to a sink: it claims a
// batch under a lease, publishes it outside any database transaction, and
// records the outcomes (PROCESSED, a retry with backoff, FAILED with a dead
// letter and an alarm, EXPIRED) in one batched write. A sweeper returns the
// rows of dead relays to PENDING once their lease ends.
//
// Any number of relays may run against one database. Per-aggregate order is
// kept by the store's claim (one relay holds an aggregate's next events at a
// time) and by the relay, which never sends an event after an earlier one of
// its aggregate failed in the same batch.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/backoff"
	"github.com/txoutbox/outbox/store"
)

// Relay moves events from a Store to a Sink. Create it with New; run it
// with Run or Drain.
type Relay struct {
	cfg     Config
	log     *slog.Logger
	backoff backoff.Policy
	wake    chan struct{}
	// expectUntil (unix nanoseconds) is set by an in-process Enqueue: its
	// transaction is about to commit, so an empty claim is retried quickly
	// until then instead of waiting a poll interval.
	expectUntil atomic.Int64
	running     atomic.Bool
	stats       counters
	// now is the local clock (monotonic), replaceable in tests.
	now func() time.Time
	// hooks feed the route-health log and Config.Observer (observer.go).
	hooks hooks
	// breaker is this relay's view of the routes' circuit breakers; nil
	// when they are off (breaker.go).
	breaker *breaker
}

// New validates cfg and returns a relay.
func New(cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if !cfg.Store.Features().ClaimBehindOwn {
		cfg.MaxBatchesInFlight = 1
	}
	r := &Relay{
		cfg:     cfg,
		log:     cfg.Logger.With("relay_id", cfg.RelayID),
		backoff: backoff.Policy{Min: cfg.BackoffMin, Max: cfg.BackoffMax},
		wake:    make(chan struct{}, 1),
		now:     time.Now,
	}
	r.hooks = newHooks(r) // observer hook
	r.breaker = newBreaker(r)
	return r, nil
}

// ID returns the relay's id as written in the audit trail.
func (r *Relay) ID() string { return r.cfg.RelayID }

// Notify wakes the relay for an immediate claim, e.g. right after a
// transaction that enqueued events commits in this process. It never blocks.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// expectSoon is how long after an in-process Enqueue the relay keeps
// looking quickly for its commit, and fastPoll the first of those looks;
// each empty look doubles the wait.
const (
	expectSoon = 250 * time.Millisecond
	fastPoll   = time.Millisecond
)

// enqueued is the in-process hybrid path: an Enqueue in this process is
// about to commit, so claim now and look again shortly if it is not yet
// visible.
func (r *Relay) enqueued() {
	r.expectUntil.Store(r.now().Add(expectSoon).UnixNano())
	r.Notify()
}

// Run delivers events until ctx is cancelled, then stops cleanly: it stops
// claiming, finishes the batch in flight (or, after StopTimeout, releases
// what it could not send) and records every outcome, so no row is left
// PROCESSING. It returns nil after a clean stop.
func (r *Relay) Run(ctx context.Context) error { return r.run(ctx, false) }

// Drain delivers events until none can move without an operator: every
// event is final, or waits behind a FAILED event of its aggregate. It
// returns nil then, or ctx's error if ctx ends first.
func (r *Relay) Drain(ctx context.Context) error { return r.run(ctx, true) }

// checkIDOrder refuses to run on a database whose settings would let the
// lanes' cursors pass committed events (store.Features.CursorGuard). A check that
// could not run (the database is away) is logged, not fatal: the safety
// net behind the cursors runs all the same.
func (r *Relay) checkIDOrder(ctx context.Context) error {
	g := r.cfg.Store.Features().CursorGuard
	if g == nil {
		return nil
	}
	err := g.CheckIDOrder(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, outbox.ErrInvalidConfig):
		return fmt.Errorf("relay: %w", err)
	default:
		r.log.Warn("could not check the outbox's id sequence at start; the relay runs on", "err", err)
		return nil
	}
}

// FailurePolicy returns what a FAILED event does to its aggregate.
func (r *Relay) FailurePolicy() FailurePolicy { return r.cfg.OnFailure }

func (r *Relay) failedBlocks() bool { return r.cfg.OnFailure == BlockAggregate }

func (r *Relay) run(ctx context.Context, drain bool) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: already running")
	}
	defer r.running.Store(false)
	if err := r.checkIDOrder(ctx); err != nil {
		return err
	}
	r.log.Info("relay started", "batch", r.cfg.BatchSize, "lease", r.cfg.Lease, "poll_interval", r.cfg.PollInterval,
		"max_retries", r.cfg.MaxRetries, "on_failure", r.cfg.OnFailure.String(), "drain", drain)
	r.restartReport(ctx)

	var wg sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.sweepLoop(bgCtx)
	}()
	if r.breaker != nil {
		r.breaker.refresh(ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.breaker.refreshLoop(bgCtx)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.laneLoop(bgCtx)
	}()
	features := r.cfg.Store.Features()
	if l := features.Listener; l != nil && !r.cfg.NoListen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Listen(bgCtx, r.Notify); err != nil && bgCtx.Err() == nil {
				r.log.Warn("wake-ups stopped; polling every poll interval", "err", err)
			}
		}()
	}
	if o := features.EnqueueObserver; o != nil {
		defer o.OnEnqueue(r.enqueued)()
	}
	defer func() {
		stopBackground()
		wg.Wait()
	}()

	p := newPipeline(r)
	p.start(ctx)
	err := p.claimLoop(ctx, drain)
	p.finish()
	r.releaseLanes(ctx)
	r.log.Info("relay stopped", "delivered", r.stats.delivered.Load())
	return err
}

// laneLoop renews and balances the relay's lanes every
// store.LaneBalanceInterval until ctx ends, whether or not the relay
// claims: a relay whose batches are all in flight (a slow destination)
// keeps its lanes and hands some to relays that join. A failure is
// logged once until a balance succeeds again.
func (r *Relay) laneLoop(ctx context.Context) {
	t := time.NewTicker(store.LaneBalanceInterval(r.cfg.Lease))
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.cfg.Store.BalanceLanes(ctx, r.cfg.RelayID, r.cfg.Lease)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			r.log.Warn("could not renew the lane leases; retrying", "err", err)
		case err == nil && failing:
			failing = false
			r.log.Info("lane leases renewed again")
		}
	}
}

// releaseLanes gives the relay's lanes back once its last batch is
// recorded, so that the other relays take them at once rather than when
// their leases end.
func (r *Relay) releaseLanes(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StopTimeout)
	defer cancel()
	if err := r.cfg.Store.ReleaseLanes(rctx, r.cfg.RelayID); err != nil {
		r.log.Warn("could not give the lanes back; the other relays take them when their leases end", "err", err)
	}
}

// sleep waits for d, a Notify, or ctx.
func (r *Relay) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-r.wake:
	}
}

// drained sweeps once (so that ended leases, deadlines and blocks are up to
// date) and reports whether nothing is left that a relay can move.
func (r *Relay) drained(ctx context.Context) (bool, error) {
	if _, err := r.sweepOnce(ctx); err != nil {
		return false, err
	}
	n, err := r.cfg.Store.CountMovable(ctx, r.failedBlocks())
	if err != nil {
		r.hooks.storeError(OpCount, err) // observer hook
		return false, err
	}
	return n == 0, nil
}
