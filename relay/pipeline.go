package relay

import (
	"context"
	"sync"
	"time"
)

// pipeline overlaps the three steps of a batch: while batch k is being
// recorded (complete), batch k+1 is published and batch k+2 is claimed.
// Publishing and recording each handle batches one at a time, in claim
// order, so that events of one aggregate are sent in id order and a later
// batch knows whether an earlier one left an aggregate undelivered.
type pipeline struct {
	r        *Relay
	toSend   chan *batch
	toRecord chan *batch
	wg       sync.WaitGroup

	mu       sync.Mutex
	inFlight map[string]bool // claim tokens not yet recorded
	slot     chan struct{}   // signalled when a batch is recorded
	claimed  int64           // sequence of the last batch claimed
	recorded int64           // sequence of the last batch recorded

	// held, used by the publisher only: aggregates that a batch left
	// undelivered, by batch sequence.
	held map[string][]heldAggregate
	// fast is the current quick-poll wait of the claimer (see idleWait).
	fast time.Duration
	// lastDrainCheck, used by the claimer only: when the drain last
	// asked the database whether it is done.
	lastDrainCheck time.Time
}

// drainCheckEvery paces the drain's question "is anything left that can
// move?": a sweep and a count over the unfinished rows, which on a large
// backlog waiting on a destination that is down cost more than the claim
// they follow. Asked at most once a second, and never while a batch is in
// flight (its events are moving, so the drain cannot be done).
const drainCheckEvery = time.Second

// drainCheckDue reports whether the drain may ask now, and if so notes the
// time.
func (p *pipeline) drainCheckDue() bool {
	p.mu.Lock()
	busy := p.recorded != p.claimed
	p.mu.Unlock()
	now := time.Now()
	if busy || (!p.lastDrainCheck.IsZero() && now.Sub(p.lastDrainCheck) < drainCheckEvery) {
		return false
	}
	p.lastDrainCheck = now
	return true
}

type heldAggregate struct {
	seq     int64
	retryIn time.Duration
	block   bool
}

func newPipeline(r *Relay) *pipeline {
	return &pipeline{
		r:        r,
		toSend:   make(chan *batch),
		toRecord: make(chan *batch, r.cfg.MaxBatchesInFlight),
		inFlight: make(map[string]bool),
		slot:     make(chan struct{}, 1),
		held:     make(map[string][]heldAggregate),
	}
}

func (p *pipeline) start(ctx context.Context) {
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		defer close(p.toRecord)
		for b := range p.toSend {
			b.outcomes = b.deliver(ctx, p.heldFor(b))
			p.noteHeld(b)
			p.toRecord <- b
		}
	}()
	go func() {
		defer p.wg.Done()
		for b := range p.toRecord {
			p.r.complete(ctx, b, b.outcomes)
			p.mu.Lock()
			delete(p.inFlight, b.claim.Token)
			p.recorded = b.seq
			p.mu.Unlock()
			select {
			case p.slot <- struct{}{}:
			default:
			}
			// A recorded batch may free what waited behind it (and a
			// drain may now be done): look again without waiting a poll.
			p.r.Notify()
		}
	}()
}

// finish lets the batches in flight go through publish and record, then returns.
func (p *pipeline) finish() {
	close(p.toSend)
	p.wg.Wait()
}

// claimLoop claims batches until ctx ends (or, when draining, until
// nothing can move) and hands them to the publisher.
func (p *pipeline) claimLoop(ctx context.Context, drain bool) error {
	r := p.r
	errDelay := time.Duration(0)
	for {
		if ctx.Err() != nil {
			if drain {
				return ctx.Err()
			}
			return nil
		}
		if !p.waitSlot(ctx) {
			continue
		}
		b, err := p.claim(ctx)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			errDelay = min(max(2*errDelay, 100*time.Millisecond), 30*time.Second)
			r.log.Warn("claim failed; retrying", "err", err, "retry_in", errDelay)
			r.sleep(ctx, errDelay)
			continue
		}
		errDelay = 0
		if b != nil {
			p.fast = 0
			p.toSend <- b
			if len(b.claim.Events) < r.cfg.BatchSize && r.cfg.Linger > 0 {
				p.linger(ctx)
			}
			continue
		}
		if drain && p.drainCheckDue() {
			done, err := r.drained(ctx)
			if err != nil && ctx.Err() == nil {
				r.log.Warn("drain check failed", "err", err)
			}
			if done {
				r.log.Info("drain complete: no event can move without an operator", "delivered", r.stats.delivered.Load())
				return nil
			}
		}
		r.sleep(ctx, p.idleWait())
	}
}

// idleWait is the wait after an empty claim: the poll interval, or less
// while an in-process Enqueue's commit is expected.
func (p *pipeline) idleWait() time.Duration {
	r := p.r
	until := r.expectUntil.Load()
	now := r.now().UnixNano()
	if now >= until {
		p.fast = 0
		return r.cfg.PollInterval
	}
	if p.fast == 0 {
		p.fast = fastPoll
	} else {
		p.fast *= 2
	}
	return min(p.fast, time.Duration(until-now), r.cfg.PollInterval)
}

// linger waits Linger after a partial batch; wake-ups meanwhile are taken
// by the claim that follows.
func (p *pipeline) linger(ctx context.Context) {
	t := time.NewTimer(p.r.cfg.Linger)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	select { // the wake-up this wait folded in
	case <-p.r.wake:
	default:
	}
}

// waitSlot waits until fewer than MaxBatchesInFlight batches are in flight.
func (p *pipeline) waitSlot(ctx context.Context) bool {
	for {
		p.mu.Lock()
		n := len(p.inFlight)
		p.mu.Unlock()
		if n < p.r.cfg.MaxBatchesInFlight {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-p.slot:
		}
	}
}

// heldFor returns, for batch b, the aggregates that an earlier batch (one
// not yet recorded when b was claimed) left undelivered: b must not send
// their events.
func (p *pipeline) heldFor(b *batch) map[string]aggregateState {
	out := map[string]aggregateState{}
	for key, hs := range p.held {
		kept := hs[:0]
		for _, h := range hs {
			if h.seq <= b.recordedAtClaim {
				continue // recorded before b was claimed: the claim saw it
			}
			kept = append(kept, h)
			if h.seq < b.seq {
				st := out[key]
				st.stopped = true
				st.retryIn = max(st.retryIn, h.retryIn)
				st.block = st.block || h.block
				out[key] = st
			}
		}
		if len(kept) == 0 {
			delete(p.held, key)
		} else {
			p.held[key] = kept
		}
	}
	return out
}

// noteHeld records the aggregates b left undelivered.
func (p *pipeline) noteHeld(b *batch) {
	if p.r.cfg.MaxBatchesInFlight == 1 {
		return
	}
	for key, st := range b.stopped {
		p.held[key] = append(p.held[key], heldAggregate{seq: b.seq, retryIn: st.retryIn, block: st.block})
	}
}
