package mysql

import (
	"context"
	"slices"

	"github.com/txoutbox/outbox/store"
)

// ClaimIDs claims the events with the given row ids, as Claim would: only
// PENDING, due rows in the relay's lanes, and only while every earlier
// unfinished event of their aggregate is claimed in the same call or is
// the relay's own in flight (req.Own). Rows it does not claim are left as
// they are (an ordinary Claim finds the PENDING ones later). req.Limit
// bounds the batch. Events come back in id order.
//
// missing lists the ids that have no row this call could see. A source
// that reads the binary log can learn of a commit a moment before the
// committed rows become visible to other sessions; it should offer those
// ids again shortly.
func (s *Store) ClaimIDs(ctx context.Context, req store.ClaimRequest, ids []int64) (c *store.Claim, missing []int64, err error) {
	if err := checkRelayID(req.RelayID); err != nil {
		return nil, nil, err
	}
	ids = slices.Sorted(slices.Values(ids))
	ids = slices.Compact(ids)
	c, err = s.claimer.ClaimIDs(ctx, req, ids)
	if err != nil {
		return nil, nil, s.wrap("claim by id", err)
	}
	if len(c.Events) == len(ids) {
		return c, nil, nil
	}
	q, err := s.q.byIDs("claim.present", ids)
	if err != nil {
		return nil, nil, err
	}
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, nil, s.wrap("claim by id: look for rows not yet visible", err)
	}
	defer rows.Close()
	present := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, nil, s.wrap("claim by id: look for rows not yet visible", err)
		}
		present[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, nil, s.wrap("claim by id: look for rows not yet visible", err)
	}
	for _, id := range ids {
		if !present[id] {
			missing = append(missing, id)
		}
	}
	return c, missing, nil
}
