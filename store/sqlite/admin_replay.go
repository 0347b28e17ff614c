package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strconv"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/filter"
	"github.com/txoutbox/outbox/store/internal/pages"
)

// errDryRun rolls a dry run's transaction back.
var errDryRun = errors.New("dry run")

// Replay implements store.Store.
func (s *Store) Replay(ctx context.Context, req store.ReplayRequest) (store.ReplayResult, error) {
	return pages.Replay(ctx, req, pages.ReplayBackend{
		Aggregates: func(ctx context.Context, after pages.Aggregate, limit int) ([]pages.Aggregate, error) {
			where, args := filter.Replay(req.Filter, requeueFilterSQL, "", "")
			args = append(args, after.Type, after.ID)
			var out []pages.Aggregate
			err := retryBusy(ctx, func() error {
				out = out[:0]
				rows, err := s.db.QueryContext(ctx, s.q.replayAggregates+where+
					` AND (aggregate_type, aggregate_id) > (?, ?) ORDER BY aggregate_type, aggregate_id LIMIT `+strconv.Itoa(limit), args...)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var a pages.Aggregate
					if err := rows.Scan(&a.Type, &a.ID); err != nil {
						return err
					}
					out = append(out, a)
				}
				return rows.Err()
			})
			return out, s.wrap("replay", err)
		},
		ReplayAggregate: func(ctx context.Context, agg pages.Aggregate, a store.OperatorAction, dryRun bool) (int64, *store.HeldAggregate, error) {
			return s.replayAggregate(ctx, req.Filter, agg, a, dryRun)
		},
	})
}

// replayAggregate replays the matching events of one aggregate in one
// transaction, in id order, unless an event holds the aggregate back.
func (s *Store) replayAggregate(ctx context.Context, f store.ReplayFilter, agg pages.Aggregate, a store.OperatorAction, dryRun bool) (int64, *store.HeldAggregate, error) {
	var (
		n    int64
		held *store.HeldAggregate
	)
	err := s.writeTx(ctx, func(c *sql.Conn, now string) error {
		n, held = 0, nil
		where, args := filter.Replay(f, requeueFilterSQL, agg.Type, agg.ID)
		var ids []outbox.EventID
		var err error
		ids, held, err = pages.ReplayRows(ctx, c, s.q.replayRows+where+` ORDER BY id`, args, s.q.replayHeld, agg)
		if err != nil || held != nil || len(ids) == 0 {
			return err
		}
		n = int64(len(ids))
		if dryRun {
			return errDryRun
		}
		for _, id := range ids {
			one := a
			one.EventID = id
			if err := s.operatorChangeTx(ctx, c, now, one, store.ReplayChange); err != nil {
				return err
			}
		}
		return nil
	})
	var ae errAction
	switch {
	case errors.Is(err, errDryRun):
		return n, nil, nil
	case errors.As(err, &ae):
		return 0, nil, ae.err
	case err != nil:
		return 0, nil, s.wrap("replay", err)
	}
	return n, held, nil
}
