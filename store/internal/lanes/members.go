package lanes

import "context"

// prune removes the members not seen since before: it finds them with a
// plain read and deletes each by its key. One DELETE with a range on
// seen_ms would lock, on InnoDB, the first row past the range too: the
// row of a live relay, which that relay's balance holds from its own
// upsert until it commits, while it waits on lanes this balance holds
// (a deadlock that, with several relays balancing every second, kept the
// lanes from moving).
func (c *Claimer) prune(ctx context.Context, q Querier, before int64) error {
	rows, err := q.Query(ctx, render(c.d, c.t, "stale", names{}), before)
	if err != nil {
		return err
	}
	var stale []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		stale = append(stale, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range stale {
		if _, err := q.Exec(ctx, render(c.d, c.t, "prune", names{}), id, before); err != nil {
			return err
		}
	}
	return nil
}

// hungerOf is what the live relays want.
type hungerOf struct {
	// high is the rounded-up share: a relay above it gives lanes up.
	high int
	// missing counts the lanes the live relays other than this one lack
	// to reach the rounded-down share.
	missing int
}

// hunger reads the live members (seen after liveSince) and the lanes each
// holds under a lease that has not ended.
func (c *Claimer) hunger(ctx context.Context, q Querier, now, liveSince int64, relayID string) (hungerOf, error) {
	rows, err := q.Query(ctx, render(c.d, c.t, "holdings", names{}), now, liveSince)
	if err != nil {
		return hungerOf{}, err
	}
	defer rows.Close()
	held := map[string]int{relayID: 0}
	for rows.Next() {
		var (
			member string
			n      int
		)
		if err := rows.Scan(&member, &n); err != nil {
			return hungerOf{}, err
		}
		held[member] = n
	}
	if err := rows.Err(); err != nil {
		return hungerOf{}, err
	}
	live := len(held)
	low, high := Count/live, (Count+live-1)/live
	h := hungerOf{high: high}
	for m, n := range held {
		if m != relayID && n < low {
			h.missing += low - n
		}
	}
	return h, nil
}

type freeLane struct {
	lane     int
	cursor   int64
	released bool // given up by its relay, rather than ended or unknown
}

// freeLanes lists up to limit lanes nobody holds: given up, expired, or
// held under a token of this relay it no longer knows (an earlier process
// of the same relay id), skipping rows another balance has locked.
func (c *Claimer) freeLanes(ctx context.Context, q Querier, now int64, relayID string, limit int) ([]freeLane, error) {
	rows, err := q.Query(ctx, render(c.d, c.t, "free", names{Limit: limit}), now, relayID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []freeLane
	for rows.Next() {
		var (
			f     freeLane
			owner *string
		)
		if err := rows.Scan(&f.lane, &f.cursor, &owner); err != nil {
			return nil, err
		}
		f.released = owner == nil
		out = append(out, f)
	}
	return out, rows.Err()
}
