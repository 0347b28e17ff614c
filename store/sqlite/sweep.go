package sqlite

import (
	"context"
	"database/sql"

	"github.com/google/uuid"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/pages"
)

// Sweep implements store.Store. Each page is one short BEGIN IMMEDIATE
// transaction, so producers get the write lock between pages.
func (s *Store) Sweep(ctx context.Context, req store.SweepRequest) (store.SweepResult, error) {
	req = req.Normalize()
	return pages.Sweep(req, s.wrap, func(step pages.SweepStep) (int64, error) {
		var n int64
		err := s.writeTx(ctx, func(c *sql.Conn, now string) error {
			var err error
			switch step {
			case pages.SweepReap:
				// Claims whose lanes are gone, then rows PROCESSING under
				// a lease of the schema before lanes.
				var dead int64
				if dead, err = s.reapClaims(ctx, c, now, req.Limit, req.RelayID); err == nil {
					n, err = s.reapPage(ctx, c, now, req.Limit, req.RelayID)
					n += dead
				}
			case pages.SweepExpire:
				n, err = s.expirePage(ctx, c, now, req.Limit, req.RelayID)
			case pages.SweepBlock:
				n, err = execCount(ctx, c, s.q.block, req.Limit)
			case pages.SweepUnblock:
				n, err = execCount(ctx, c, s.q.unblock, req.Limit, req.FailedBlocks)
			}
			return err
		})
		return n, err
	})
}

func execCount(ctx context.Context, c *sql.Conn, query string, args ...any) (int64, error) {
	r, err := c.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// reapClaims ends up to limit claims whose lanes are all gone (their
// relay's lease ended, or another relay took them): each of their rows
// (those the claim's relay did not complete) is audited LEASE_EXPIRED
// under the claim's token, whatever became of it since, and the claim's
// row is deleted. It returns the rows audited.
func (s *Store) reapClaims(ctx context.Context, c *sql.Conn, now string, limit int, relay string) (int64, error) {
	type claimRow struct {
		token, lanes, tokens, ids string
	}
	rows, err := c.QueryContext(ctx, s.q.allClaims, limit)
	if err != nil {
		return 0, err
	}
	var cls []claimRow
	for rows.Next() {
		var r claimRow
		if err := rows.Scan(&r.token, &r.lanes, &r.tokens, &r.ids); err != nil {
			rows.Close()
			return 0, err
		}
		cls = append(cls, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var n int64
	for _, cl := range cls {
		m, err := laneTokens(cl.lanes, cl.tokens)
		if err != nil {
			return n, err
		}
		if held, _, err := s.heldLanesOf(ctx, c, m, 0); err != nil || len(held) > 0 {
			if err != nil {
				return n, err
			}
			continue
		}
		rows, err := c.QueryContext(ctx, s.q.deadClaimRows, cl.ids)
		if err != nil {
			return n, err
		}
		type dead struct {
			id, retries int64
			eventID     string
		}
		var ds []dead
		for rows.Next() {
			var d dead
			if err := rows.Scan(&d.id, &d.eventID, &d.retries); err != nil {
				rows.Close()
				return n, err
			}
			ds = append(ds, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return n, err
		}
		for _, d := range ds {
			if _, err := c.ExecContext(ctx, s.q.audit, d.eventID, cl.token, string(store.LeaseExpired), d.id,
				d.retries+1, relay, now, "the lease of its lane ended without a result; returned to PENDING"); err != nil {
				return n, err
			}
		}
		if _, err := c.ExecContext(ctx, s.q.claimDelete, cl.token); err != nil {
			return n, err
		}
		n += int64(len(ds))
	}
	return n, nil
}

// reapPage returns one page of PROCESSING rows whose lease ended to PENDING,
// keeping retry_count, and audits each with the claim token it had.
func (s *Store) reapPage(ctx context.Context, c *sql.Conn, now string, limit int, relay string) (int64, error) {
	type reaped struct {
		id, retries int64
		eventID     string
		token       sql.NullString
		lockedUntil string
	}
	rows, err := c.QueryContext(ctx, s.q.reapSelect, now, limit)
	if err != nil {
		return 0, err
	}
	var rs []reaped
	for rows.Next() {
		var r reaped
		if err := rows.Scan(&r.id, &r.eventID, &r.token, &r.retries, &r.lockedUntil); err != nil {
			rows.Close()
			return 0, err
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(rs) == 0 {
		return 0, err
	}
	ids := make([]int64, len(rs))
	for i, r := range rs {
		ids[i] = r.id
	}
	n, err := execCount(ctx, c, s.q.reapUpdate, int64sJSON(ids))
	if err != nil {
		return 0, err
	}
	for _, r := range rs {
		token := r.token.String
		if !r.token.Valid || token == "" {
			token = uuid.NewString()
		}
		msg := "lease ended at " + r.lockedUntil + " without a result; returned to PENDING"
		if _, err := c.ExecContext(ctx, s.q.audit, r.eventID, token, string(store.LeaseExpired), r.id,
			r.retries+1, relay, now, msg); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// CountMovable implements store.Store.
func (s *Store) CountMovable(ctx context.Context, failedBlocks bool) (int64, error) {
	var n int64
	err := retryBusy(ctx, func() error {
		return s.db.QueryRowContext(ctx, s.q.countMovable, failedBlocks).Scan(&n)
	})
	if err != nil {
		return 0, s.wrap("count movable events", err)
	}
	return n, nil
}
