package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

// Claim implements store.Store with the lanes' claim (store/internal/lanes):
// it reads the relay's lanes without writing an event row, and records the
// batch as one row of the claims table.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	var c *store.Claim
	err := retrySerialization(ctx, func() error {
		var err error
		c, err = s.claimer.Claim(ctx, req)
		return err
	})
	if err != nil {
		return nil, s.wrap("claim", err)
	}
	return c, nil
}

// claimBackend is the PostgreSQL part of the lanes' claim.
type claimBackend struct{ s *Store }

// ReadClaim implements lanes.Backend: the claim's rows and the relay's
// claims, in one round trip.
func (b claimBackend) ReadClaim(ctx context.Context, q lanes.ReadQuery) (lanes.ReadResult, error) {
	if q.IDs != nil {
		return b.readClaimIDs(ctx, q)
	}
	s := b.s
	res := lanes.ReadResult{FirstOpen: map[int]int64{}, Scanned: map[int]int{}, ScanEnd: map[int]int64{}}
	ls := make([]int32, len(q.Lanes))
	curs := make([]int64, len(q.Lanes))
	ks := make([]int32, len(q.Lanes))
	for i, l := range q.Lanes {
		ls[i], curs[i], ks[i] = int32(l.Lane), l.Cursor, int32(l.Scan)
	}
	// One round trip, in one implicit transaction: the claims and the
	// sequence's last value, then a transaction id for the read (after
	// that value: see lanes.Horizon), then the read.
	batch := &pgx.Batch{}
	batch.Queue(s.q.claims, q.RelayID)
	batch.Queue(xactIDSQL)
	batch.Queue(s.q.readClaim, ls, curs, ks, q.Limit, q.Deadline, q.FailedBlocks, q.Limit, q.OwnClaims, q.RelayID)
	br := s.pool.SendBatch(ctx, batch)
	defer br.Close()
	claims, lastID, unordered, err := scanClaims(br)
	if err != nil {
		return res, err
	}
	res.Claims = claims
	var xid int64
	if err := br.QueryRow().Scan(&xid); err != nil {
		return res, err
	}
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
			xmin             int64
		)
		if err := rows.Scan(&part, &lane, &r.ID, &r.Agg.Type, &r.Agg.ID, &status, &r.AvailableAt, &hold, &xmin); err != nil {
			return res, err
		}
		r.Lane, r.Status, r.Hold = int(lane), outbox.Status(status), int(hold)
		switch part {
		case 0:
			r.Part = lanes.PartFIFO
		case 5:
			res.FirstOpen[r.Lane], res.Scanned[r.Lane], res.ScanEnd[r.Lane] = r.ID, int(hold), xmin
			continue
		case 2:
			r.Part = lanes.PartDeadline
		case 3:
			r.Part = lanes.PartRun
			if xmin == 1 { // in the window too
				w := r
				w.Part = lanes.PartFIFO
				res.Rows = append(res.Rows, w)
			}
		case 4:
			res.Now = r.AvailableAt
			res.Snapshot = &lanes.Snapshot{LastID: lastID, Xid: uint64(xid), Xmin: uint64(xmin), Unordered: unordered}
			continue
		}
		res.Rows = append(res.Rows, r)
	}
	return res, rows.Err()
}

// scanClaims reads the first result of br (claim.claims): the relay's claims,
// the sequence's last value and whether it draws ids out of order.
func scanClaims(br pgx.BatchResults) (claims []lanes.ClaimRow, lastID int64, unordered bool, err error) {
	rows, err := br.Query()
	if err != nil {
		return nil, 0, false, err
	}
	defer rows.Close()
	var out []lanes.ClaimRow
	for rows.Next() {
		var (
			c      lanes.ClaimRow
			token  *string
			ls     []int32
			tokens []int64
		)
		if err := rows.Scan(&token, &ls, &tokens, &c.IDs); err != nil {
			return nil, 0, false, err
		}
		if token == nil {
			if len(c.IDs) == 2 {
				lastID, unordered = c.IDs[0], c.IDs[1] == 1
			}
			continue
		}
		c.Token = *token
		c.Lanes = make(map[int]int64, len(ls))
		for i, l := range ls {
			if i < len(tokens) {
				c.Lanes[int(l)] = tokens[i]
			}
		}
		out = append(out, c)
	}
	return out, lastID, unordered, rows.Err()
}

// CommitClaim implements lanes.Backend.
// Refused implements lanes.Backend: the server's error ended the claim's
// statement, and with it its implicit transaction.
func (b claimBackend) Refused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}

func (b claimBackend) CommitClaim(ctx context.Context, c lanes.CommitRequest) (lanes.CommitResult, error) {
	s := b.s
	var res lanes.CommitResult
	fenceLanes := make([]int32, 0, len(c.Fence))
	fenceTokens := make([]int64, 0, len(c.Fence))
	for _, l := range slices.Sorted(maps.Keys(c.Fence)) {
		fenceLanes = append(fenceLanes, int32(l))
		fenceTokens = append(fenceTokens, c.Fence[l])
	}
	deferIDs := make([]int64, 0, len(c.Defer))
	deferAt := make([]time.Time, 0, len(c.Defer))
	for _, id := range slices.Sorted(maps.Keys(c.Defer)) {
		deferIDs = append(deferIDs, id)
		deferAt = append(deferAt, c.Defer[id])
	}
	block := c.Block
	if block == nil {
		block = []int64{}
	}
	ids := c.IDs
	if ids == nil {
		ids = []int64{}
	}
	rows, err := s.pool.Query(ctx, s.q.commitClaim, c.Token, textlimit.StorableText(c.RelayID, textlimit.MaxRelayIDRunes),
		fenceLanes, fenceTokens, c.MinLeaseMS, deferIDs, deferAt, block, ids)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			untilMS   int64
			id        *int64
			eventID   *[16]byte
			aggType   *string
			aggID     *string
			evType    *string
			payload   []byte
			headers   []byte
			retries   *int
			created   *time.Time
			expiresAt *time.Time
			expired   *bool
			seq       *int64
		)
		if err := rows.Scan(&res.OK, &untilMS, &res.DBTime, &id, &eventID, &aggType, &aggID, &evType, &payload, &headers,
			&retries, &created, &expiresAt, &expired, &seq); err != nil {
			return res, err
		}
		res.LeaseUntil = time.UnixMilli(untilMS).UTC()
		if id == nil {
			continue
		}
		ev := store.Claimed{RetryCount: *retries, Expired: *expired}
		ev.ID, ev.EventID = *id, outbox.EventID(*eventID)
		ev.AggregateType, ev.AggregateID, ev.EventType = *aggType, *aggID, *evType
		ev.Payload = json.RawMessage(payload)
		ev.Headers = backend.DecodeHeaders(headers)
		ev.Attempt = ev.RetryCount + 1
		ev.CreatedAt = *created
		if expiresAt != nil {
			ev.ExpiresAt = *expiresAt
		}
		if seq != nil {
			ev.AggregateSeq = *seq
		}
		res.Events = append(res.Events, ev)
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	slices.SortFunc(res.Events, func(a, b store.Claimed) int { return cmp.Compare(a.ID, b.ID) })
	return res, nil
}
