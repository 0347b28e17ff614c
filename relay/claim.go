package relay

import (
	"context"

	"github.com/txoutbox/outbox/store"
)

// claim claims one batch; nil when nothing was due.
func (p *pipeline) claim(ctx context.Context) (*batch, error) {
	r := p.r
	p.mu.Lock()
	own := make([]string, 0, len(p.inFlight))
	for t := range p.inFlight {
		own = append(own, t)
	}
	recorded := p.recorded
	p.mu.Unlock()
	// The claim runs to completion even if ctx ends meanwhile: a claim
	// cancelled mid-flight might commit unseen and strand its rows until
	// the lease ends. What it returns is delivered or released.
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/2)
	defer cancel()
	localClaim := r.now()
	c, err := r.cfg.Store.Claim(claimCtx, store.ClaimRequest{
		RelayID:      r.cfg.RelayID,
		Limit:        r.cfg.BatchSize,
		Lease:        r.cfg.Lease,
		FailedBlocks: r.failedBlocks(),
		Own:          own,
		StrictFIFO:   r.cfg.StrictFIFO,
		FIFOShare:    r.cfg.FIFOShare,
	})
	r.stats.claims.Add(1)
	r.hooks.claimed(localClaim, c, err) // observer hook
	if err != nil {
		r.stats.claimErrors.Add(1)
		return nil, err
	}
	if len(c.Events) == 0 {
		return nil, nil
	}
	r.stats.claimed.Add(int64(len(c.Events)))
	p.mu.Lock()
	p.claimed++
	b := &batch{relay: r, claim: c, localClaim: localClaim, localClaimed: r.now(), seq: p.claimed, recordedAtClaim: recorded}
	p.inFlight[c.Token] = true
	p.mu.Unlock()
	return b, nil
}
