package cdctrack

import (
	"context"
	"time"

	"github.com/txoutbox/outbox/store"
)

// ClaimIDs claims given rows by id: the backend's ClaimIDs (for example
// postgres.Store.ClaimIDs or mysql.Store.ClaimIDs). missing are the ids
// it found no row for.
type ClaimIDs func(ctx context.Context, req store.ClaimRequest, ids []int64) (c *store.Claim, missing []int64, err error)

// ClaimStreamed takes up to req.Limit streamed ids from the queue and
// claims them with claimIDs. took reports whether the queue held any (nil
// claim and false when it was empty). Ids whose rows were not visible yet,
// or visible but not claimable (held behind an earlier event of their
// aggregate, or locked for an instant by another statement), are offered
// again a few times, with wake called when the next look is due, before
// they are left to the safety-net poll; so a row committed an instant
// before it is visible, or locked an instant, does not wait a whole poll
// interval. A failed claim puts the ids back at the head of the queue.
func (t *Tracker[P]) ClaimStreamed(ctx context.Context, req store.ClaimRequest, claimIDs ClaimIDs, wake func()) (c *store.Claim, took bool, err error) {
	ids := t.Take(req.Limit)
	if len(ids) == 0 {
		return nil, false, nil
	}
	c, missing, err := claimIDs(ctx, req, ids)
	if err != nil {
		t.PutBack(ids)
		return nil, true, err
	}
	ids = t.lookAgain(ids, missing, wake)
	got := make([]int64, len(c.Events))
	for i, ev := range c.Events {
		got[i] = ev.ID
	}
	ids = t.lookAgain(ids, without(ids, got), wake)
	t.Claimed(c.Token, time.Now().Add(req.Lease), ids, got)
	return c, true, nil
}

// lookAgain offers notTaken again (NotVisible) and returns ids without
// those that will be looked at again.
func (t *Tracker[P]) lookAgain(ids, notTaken []int64, wake func()) []int64 {
	if len(notTaken) == 0 {
		return ids
	}
	again, wait := t.NotVisible(notTaken)
	if len(again) > 0 {
		time.AfterFunc(wait, wake)
	}
	return without(ids, again)
}

// without returns ids without those in drop, in order.
func without(ids, drop []int64) []int64 {
	if len(drop) == 0 {
		return ids
	}
	skip := make(map[int64]bool, len(drop))
	for _, id := range drop {
		skip[id] = true
	}
	out := ids[:0:0]
	for _, id := range ids {
		if !skip[id] {
			out = append(out, id)
		}
	}
	return out
}
