package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

// readClaimIDs is ReadClaim for q.IDs.
func (b claimBackend) readClaimIDs(ctx context.Context, q lanes.ReadQuery) (lanes.ReadResult, error) {
	s := b.s
	res := lanes.ReadResult{}
	ls := make([]int32, len(q.Lanes))
	curs := make([]int64, len(q.Lanes))
	for i, l := range q.Lanes {
		ls[i], curs[i] = int32(l.Lane), l.Cursor
	}
	batch := &pgx.Batch{}
	batch.Queue(s.q.claims, q.RelayID)
	batch.Queue(s.q.readClaimIDs, ls, curs, q.IDs, q.Limit, q.FailedBlocks, q.OwnClaims)
	br := s.pool.SendBatch(ctx, batch)
	defer br.Close()
	claims, _, _, err := scanClaims(br)
	if err != nil {
		return res, err
	}
	res.Claims = claims
	rows, err := br.Query()
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			part, lane, hold int32
			r                lanes.Row
			status           string
		)
		if err := rows.Scan(&part, &lane, &r.ID, &r.Agg.Type, &r.Agg.ID, &status, &r.AvailableAt, &hold); err != nil {
			return res, err
		}
		r.Lane, r.Status, r.Hold = int(lane), outbox.Status(status), int(hold)
		switch part {
		case 1:
			r.Part = lanes.PartFIFO
		case 3:
			r.Part = lanes.PartRun
		case 4:
			res.Now = r.AvailableAt
			continue
		}
		res.Rows = append(res.Rows, r)
	}
	return res, rows.Err()
}

// ClaimIDs claims the events with the given row ids, as Claim would: only
// PENDING, due rows in the relay's lanes, and only while every earlier
// unfinished event of their aggregate is claimed in the same call or is
// the relay's own in flight (req.Own). Rows it does not claim are left as
// they are (an ordinary Claim finds the PENDING ones later). req.Limit
// bounds the batch. Events come back in id order.
//
// missing lists the ids that have no row this call could see. A source
// that reads the write-ahead log can learn of a commit a moment before the
// committed rows become visible to other sessions; it should offer those
// ids again shortly.
func (s *Store) ClaimIDs(ctx context.Context, req store.ClaimRequest, ids []int64) (c *store.Claim, missing []int64, err error) {
	err = retrySerialization(ctx, func() error {
		var err error
		c, err = s.claimer.ClaimIDs(ctx, req, ids)
		return err
	})
	if err != nil {
		return nil, nil, s.wrap("claim by id", err)
	}
	if len(c.Events) < len(ids) {
		rows, err := s.pool.Query(ctx, s.q.missingIDs, ids)
		if err != nil {
			return nil, nil, s.wrap("claim by id: look for rows not yet visible", err)
		}
		if missing, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return nil, nil, s.wrap("claim by id: look for rows not yet visible", err)
		}
	}
	return c, missing, nil
}
