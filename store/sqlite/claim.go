package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/lanes"
	sqlite "modernc.org/sqlite"
)

// Claim implements store.Store with the lanes' claim (store/internal/lanes):
// it reads the relay's lanes in a read transaction, and records the batch
// as one row of the claims table in a short BEGIN IMMEDIATE transaction
// (only when there is something to claim, so that an idle poll leaves the
// write lock to the producers).
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	c, err := s.claimer.Claim(ctx, req)
	if err != nil {
		return nil, s.wrap("claim", err)
	}
	return c, nil
}

// claimBackend is the SQLite part of the lanes' claim.
type claimBackend struct{ s *Store }

// ReadClaim implements lanes.Backend, in one read transaction.
func (b claimBackend) ReadClaim(ctx context.Context, q lanes.ReadQuery) (lanes.ReadResult, error) {
	s := b.s
	var res lanes.ReadResult
	if q.IDs != nil {
		return res, fmt.Errorf("%w: SQLite has no source that claims events by id", outbox.ErrInvalidConfig)
	}
	ls := make([]int, len(q.Lanes))
	for i, l := range q.Lanes {
		ls[i] = l.Lane
	}
	lanesJSON, err := json.Marshal(ls)
	if err != nil {
		return res, err
	}
	err = s.readTx(ctx, func(c *sql.Conn, now string) error {
		res = lanes.ReadResult{}
		if res.Now, err = parseTime(now); err != nil {
			return err
		}
		if res.Claims, err = s.claimsOf(ctx, c, q.RelayID); err != nil {
			return err
		}
		rows, err := c.QueryContext(ctx, s.q.claimRead, now, q.Limit, q.RelayID, string(lanesJSON), q.Deadline, q.OwnClaims, q.FailedBlocks)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				part   int
				r      lanes.Row
				lane   sql.NullInt64
				status string
				avail  string
			)
			if err := rows.Scan(&part, &r.ID, &lane, &r.Agg.Type, &r.Agg.ID, &status, &avail); err != nil {
				return err
			}
			r.Lane, r.Status, r.Part = int(lane.Int64), outbox.Status(status), lanes.Part(part)
			if r.AvailableAt, err = parseTime(avail); err != nil {
				return err
			}
			res.Rows = append(res.Rows, r)
		}
		return rows.Err()
	})
	return res, err
}

// CommitClaim implements lanes.Backend, in one BEGIN IMMEDIATE transaction.
// Refused implements lanes.Backend: SQLite refused a statement of the
// claim's transaction (or its COMMIT), so it was rolled back.
func (b claimBackend) Refused(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se)
}

func (b claimBackend) CommitClaim(ctx context.Context, cr lanes.CommitRequest) (lanes.CommitResult, error) {
	s := b.s
	var res lanes.CommitResult
	err := s.writeTx(ctx, func(c *sql.Conn, now string) error {
		res = lanes.CommitResult{}
		held, until, err := s.heldLanesOf(ctx, c, cr.Fence, cr.MinLeaseMS)
		if err != nil || len(held) < len(cr.Fence) {
			return err
		}
		res.OK = true
		res.LeaseUntil = time.UnixMilli(until).UTC()
		if res.DBTime, err = parseTime(now); err != nil {
			return err
		}
		byTime := map[string][]int64{}
		for id, at := range cr.Defer {
			byTime[formatTime(at)] = append(byTime[formatTime(at)], id)
		}
		for _, at := range slices.Sorted(maps.Keys(byTime)) {
			ids := byTime[at]
			slices.Sort(ids)
			if _, err := c.ExecContext(ctx, s.q.claimDefer, int64sJSON(ids), at); err != nil {
				return err
			}
		}
		if len(cr.Block) > 0 {
			if _, err := c.ExecContext(ctx, s.q.claimBlock, int64sJSON(cr.Block)); err != nil {
				return err
			}
		}
		if len(cr.IDs) == 0 {
			return nil
		}
		rows, err := c.QueryContext(ctx, s.q.claimEvents, now, int64sJSON(cr.IDs))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			ev, err := scanClaimed(rows)
			if err != nil {
				return err
			}
			res.Events = append(res.Events, ev)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		if len(res.Events) == 0 {
			return nil
		}
		slices.SortFunc(res.Events, func(a, b store.Claimed) int { return cmp.Compare(a.ID, b.ID) })
		ids := make([]int64, len(res.Events))
		for i, e := range res.Events {
			ids[i] = e.ID
		}
		ls := slices.Sorted(maps.Keys(cr.Fence))
		ts := make([]int64, len(ls))
		for i, l := range ls {
			ts[i] = cr.Fence[l]
		}
		lsJSON, _ := json.Marshal(ls)
		tsJSON, _ := json.Marshal(ts)
		_, err = c.ExecContext(ctx, s.q.insertClaim, cr.Token, textlimit.StorableText(cr.RelayID, textlimit.MaxRelayIDRunes),
			string(lsJSON), string(tsJSON), int64sJSON(ids))
		return err
	})
	return res, err
}

// scanClaimed reads a row of claim.events.
func scanClaimed(rows *sql.Rows) (store.Claimed, error) {
	var (
		ev                 store.Claimed
		payload, headers   string
		createdAt          string
		expiresAt          sql.NullString
		retryCount, expInt int64
		seq                sql.NullInt64
	)
	if err := rows.Scan(&ev.ID, &ev.EventID, &ev.AggregateType, &ev.AggregateID, &ev.EventType,
		&payload, &headers, &retryCount, &createdAt, &expiresAt, &expInt, &seq); err != nil {
		return ev, err
	}
	ev.AggregateSeq = seq.Int64
	ev.Payload = json.RawMessage(payload)
	ev.Headers = backend.DecodeHeaders([]byte(headers))
	ev.RetryCount = int(retryCount)
	ev.Attempt = ev.RetryCount + 1
	ev.Expired = expInt != 0
	var err error
	if ev.CreatedAt, err = parseTime(createdAt); err != nil {
		return ev, err
	}
	ev.ExpiresAt, err = parseNullTime(expiresAt)
	return ev, err
}
