package postgres

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// claimIDsSQL claims the given rows ($5) by id, for a source that learns of
// new events from the write-ahead log rather than by scanning the table.
// It keeps Claim's rules:
//
//	cand: the given rows that are PENDING and due.
//	g:    their aggregates, with the aggregate's last row PROCESSING under
//	      one of this relay's own tokens ($4), if any.
//	agg:  per aggregate, stop_id: its first unfinished row that this claim
//	      may not step over: anything but a candidate after last_mine or a
//	      row of the relay's own claims (FAILED counts only when $3). The
//	      ORDER BY spells out the aggregate index, so that the scan walks
//	      the aggregate's unfinished rows in id order and stops at that row
//	      even with no statistics (an index scan in id order from the
//	      table's first row would read every finished row too).
//	ok:   the candidates before their aggregate's stop_id.
//	l:    those this statement could lock (SKIP LOCKED); an aggregate's run
//	      is cut at its first ok row it could not lock (cut), so that two
//	      claims never hold parts of one run.
//
// Rows given here and not returned stay as they are: PENDING rows are
// found later by the ordinary claim. Rows are looked up by joining the ids
// to the table, which is a primary-key lookup per id: "id = ANY(...)" with
// a status filter can be planned, on a table without statistics, as a scan
// of the whole partial pending index (id is its second column).
const claimIDsSQL = `
WITH cand AS MATERIALIZED (
    SELECT o.id, o.aggregate_type, o.aggregate_id
    FROM unnest($5::bigint[]) AS i(id) JOIN "{{.Outbox}}" o ON o.id = i.id
    WHERE o.status = 'PENDING' AND o.available_at <= now()
),
g AS MATERIALIZED (
    SELECT a.aggregate_type, a.aggregate_id,
        CASE WHEN cardinality($4::uuid[]) > 0 THEN
            COALESCE((SELECT m.id FROM "{{.Outbox}}" m
              WHERE m.aggregate_type = a.aggregate_type AND m.aggregate_id = a.aggregate_id
                AND m.status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED')
                AND m.status = 'PROCESSING' AND m.lock_token = ANY($4::uuid[])
              ORDER BY m.aggregate_type DESC, m.aggregate_id DESC, m.id DESC LIMIT 1), 0)
        ELSE 0 END AS last_mine
    FROM (SELECT DISTINCT aggregate_type, aggregate_id FROM cand) a
),
agg AS MATERIALIZED (
    SELECT g.aggregate_type, g.aggregate_id,
        COALESCE((SELECT m.id FROM "{{.Outbox}}" m
          WHERE m.aggregate_type = g.aggregate_type AND m.aggregate_id = g.aggregate_id
            AND m.status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED')
            AND (m.status <> 'FAILED' OR $3::bool)
            AND NOT (m.status = 'PROCESSING' AND m.lock_token = ANY($4::uuid[]))
            AND (m.id <= g.last_mine OR m.id NOT IN (SELECT id FROM cand))
          ORDER BY m.aggregate_type, m.aggregate_id, m.id LIMIT 1),
          9223372036854775807) AS stop_id
    FROM g
),
ok AS MATERIALIZED (
    SELECT c.id, c.aggregate_type, c.aggregate_id FROM cand c
    JOIN agg USING (aggregate_type, aggregate_id)
    WHERE c.id < agg.stop_id
),
l AS MATERIALIZED (
    SELECT o.id, o.aggregate_type, o.aggregate_id FROM ok JOIN "{{.Outbox}}" o ON o.id = ok.id
    WHERE o.status = 'PENDING'
    ORDER BY o.id
    FOR NO KEY UPDATE OF o SKIP LOCKED
),
cut AS MATERIALIZED (
    SELECT aggregate_type, aggregate_id, min(id) AS cut_id FROM ok
    WHERE id NOT IN (SELECT id FROM l)
    GROUP BY 1, 2
)
UPDATE "{{.Outbox}}" o SET status = 'PROCESSING', lock_token = $1::uuid,
    locked_until = now() + $2::bigint * interval '1 millisecond'
WHERE o.id = ANY(ARRAY(
    SELECT l.id FROM l LEFT JOIN cut USING (aggregate_type, aggregate_id)
    WHERE l.id < COALESCE(cut.cut_id, 9223372036854775807)))
RETURNING o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
    o.retry_count, o.created_at, o.expires_at,
    (o.expires_at IS NOT NULL AND o.expires_at <= now()) AS expired, now(), o.locked_until`

// ClaimIDs claims the events with the given row ids, as Claim would: only
// PENDING, due rows, and only while every earlier unfinished event of
// their aggregate is claimed in the same call or is PROCESSING under one
// of req.Own. Rows it does not claim are left as they are (an ordinary
// Claim finds the PENDING ones later). req.Limit is not used: the caller
// bounds len(ids). Events come back in id order.
//
// missing lists the ids that have no row this call could see. A source
// that reads the write-ahead log can learn of a commit a moment before the
// committed rows become visible to other sessions; it should offer those
// ids again shortly.
func (s *Store) ClaimIDs(ctx context.Context, req store.ClaimRequest, ids []int64) (c *store.Claim, missing []int64, err error) {
	if err := req.Validate(); err != nil {
		return nil, nil, err
	}
	c = &store.Claim{Token: uuid.NewString()}
	if len(ids) == 0 {
		return c, nil, nil
	}
	own := req.Own
	if own == nil {
		own = []string{}
	}
	query := s.q.claimIDs
	err = retrySerialization(ctx, func() error {
		c.Events = c.Events[:0]
		rows, err := s.pool.Query(ctx, query, c.Token, req.Lease.Milliseconds(), req.FailedBlocks, own, ids)
		if err != nil {
			return err
		}
		return scanClaimed(rows, c)
	})
	if err != nil {
		return nil, nil, s.wrap("claim by id", err)
	}
	sort.Slice(c.Events, func(i, j int) bool { return c.Events[i].ID < c.Events[j].ID })
	if len(c.Events) == 0 {
		c.DBTime, c.LockedUntil = time.Time{}, time.Time{}
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

// scanClaimed reads the RETURNING rows of a claim into c and closes rows.
func scanClaimed(rows pgx.Rows, c *store.Claim) error {
	defer rows.Close()
	for rows.Next() {
		var (
			ev        store.Claimed
			eventID   [16]byte
			payload   []byte
			headers   []byte
			expiresAt *time.Time
		)
		if err := rows.Scan(&ev.ID, &eventID, &ev.AggregateType, &ev.AggregateID, &ev.EventType,
			&payload, &headers, &ev.RetryCount, &ev.CreatedAt, &expiresAt, &ev.Expired,
			&c.DBTime, &c.LockedUntil); err != nil {
			return err
		}
		ev.EventID = outbox.EventID(eventID)
		ev.Payload = json.RawMessage(payload)
		ev.Headers = backend.DecodeHeaders(headers)
		ev.Attempt = ev.RetryCount + 1
		if expiresAt != nil {
			ev.ExpiresAt = *expiresAt
		}
		c.Events = append(c.Events, ev)
	}
	return rows.Err()
}

// missingIDsSQL returns the ids of $1 that have no row (yet) in the table.
const missingIDsSQL = `SELECT i FROM unnest($1::bigint[]) i WHERE NOT EXISTS (SELECT 1 FROM "{{.Outbox}}" o WHERE o.id = i)`
