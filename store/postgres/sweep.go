package postgres

import (
	"context"

	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/pages"
)

// Sweep implements store.Store.
func (s *Store) Sweep(ctx context.Context, req store.SweepRequest) (store.SweepResult, error) {
	req = req.Normalize()
	res, err := pages.Sweep(req, s.wrap, func(step pages.SweepStep) (int64, error) {
		var query string
		var args []any
		switch step {
		case pages.SweepReap:
			// Claims whose lanes are gone, then rows PROCESSING under a
			// lease of the schema before lanes.
			relay := textlimit.StorableText(req.RelayID, textlimit.MaxRelayIDRunes)
			var n int64
			err := retrySerialization(ctx, func() error {
				var err error
				n, err = s.execOrCount(ctx, s.q.reapClaims, req.Limit, relay)
				return err
			})
			if err != nil {
				return n, err
			}
			var legacy int64
			err = retrySerialization(ctx, func() error {
				var err error
				legacy, err = s.execOrCount(ctx, s.q.reap, req.Limit, relay)
				return err
			})
			return n + legacy, err
		case pages.SweepExpire:
			return s.expirePage(ctx, req)
		case pages.SweepBlock:
			query, args = s.q.block, []any{req.Limit}
		case pages.SweepUnblock:
			query, args = s.q.unblock, []any{req.Limit, req.FailedBlocks}
		}
		var n int64
		err := retrySerialization(ctx, func() error {
			var err error
			n, err = s.execOrCount(ctx, query, args...)
			return err
		})
		return n, err
	})
	if err != nil {
		return res, err
	}
	s.maybeAnalyze(ctx)
	return res, nil
}

// execOrCount runs a statement that either ends in "SELECT count(*)" (and
// returns that count) or is a plain UPDATE (and returns rows affected).
func (s *Store) execOrCount(ctx context.Context, query string, args ...any) (int64, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	counted := false
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
		counted = true
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if !counted {
		n = rows.CommandTag().RowsAffected()
	}
	return n, nil
}

// CountMovable implements store.Store.
func (s *Store) CountMovable(ctx context.Context, failedBlocks bool) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, s.q.countMovable, failedBlocks).Scan(&n); err != nil {
		return 0, s.wrap("count movable events", err)
	}
	return n, nil
}
