package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

// readClaimIDsSQL is readClaimSQL for a window of given rows ($3), for a
// source that learns of new events from the write-ahead log rather than by
// scanning the lanes:
//
//	w: the given rows that are PENDING and due in the relay's lanes ($1,
//	   with their cursors $2). Rows are looked up by joining the ids to the
//	   table: a primary-key lookup per id.
//	a: their aggregates, and n the length of their runs ($4 the batch
//	   size, $6 the relay's claims in flight);
//	r: per aggregate, its first n unfinished rows: those of hold 1 and 2
//	   (the held index) and those of hold 0 from its lane's cursor on (the
//	   aggregate index), merged in id order; FAILED counts when $5.
const readClaimIDsSQL = `
WITH l AS (
    SELECT * FROM unnest($1::int[], $2::bigint[]) AS l(lane, cur)
),
w AS MATERIALIZED (
    SELECT o.lane, o.id, o.aggregate_type, o.aggregate_id, o.status, o.available_at
    FROM unnest($3::bigint[]) AS i(id) JOIN "{{.Outbox}}" o ON o.id = i.id
    WHERE o.status = 'PENDING' AND o.available_at <= now() AND o.lane = ANY($1::int[])
),
a AS MATERIALIZED (
    SELECT DISTINCT w.lane, w.aggregate_type, w.aggregate_id, l.cur FROM w JOIN l ON l.lane = w.lane
),
n AS (
    SELECT GREATEST(1, ceil($4::numeric / GREATEST(count(*), 1)))::int * (1 + $6::int) AS n FROM a
),
r AS (
    SELECT a.lane, e.id, a.aggregate_type, a.aggregate_id, e.status, e.available_at, e.hold
    FROM a CROSS JOIN n CROSS JOIN LATERAL (
        SELECT * FROM (
            (SELECT o.id, o.status, o.available_at, o.hold FROM "{{.Outbox}}" o
             WHERE o.aggregate_type = a.aggregate_type AND o.aggregate_id = a.aggregate_id AND o.hold > 0
               AND o.status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED') AND (o.status <> 'FAILED' OR $5::bool)
             ORDER BY o.aggregate_type, o.aggregate_id, o.id LIMIT n.n)
            UNION ALL
            (SELECT o.id, o.status, o.available_at, o.hold FROM "{{.Outbox}}" o
             WHERE o.aggregate_type = a.aggregate_type AND o.aggregate_id = a.aggregate_id AND o.id >= a.cur
               AND o.hold = 0 AND o.status IN ('PENDING', 'PROCESSING')
             ORDER BY o.aggregate_type, o.aggregate_id, o.id LIMIT n.n)
        ) x ORDER BY id LIMIT n.n
    ) e
)
SELECT 1, lane, id, aggregate_type, aggregate_id, status, available_at, 0 FROM w
UNION ALL SELECT 3, lane, id, aggregate_type, aggregate_id, status, available_at, hold FROM r
UNION ALL SELECT 4, 0, 0, '', '', '', now(), 0`

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

// missingIDsSQL returns the ids of $1 that have no row (yet) in the table.
const missingIDsSQL = `SELECT i FROM unnest($1::bigint[]) i WHERE NOT EXISTS (SELECT 1 FROM "{{.Outbox}}" o WHERE o.id = i)`
