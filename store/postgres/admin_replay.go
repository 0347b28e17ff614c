package postgres

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/filter"
	"github.com/txoutbox/outbox/store/internal/pages"
)

// Replay implements store.Store.
func (s *Store) Replay(ctx context.Context, req store.ReplayRequest) (store.ReplayResult, error) {
	return pages.Replay(ctx, req, pages.ReplayBackend{
		Aggregates: func(ctx context.Context, after pages.Aggregate, limit int) ([]pages.Aggregate, error) {
			where, args := filter.Replay(req.Filter, requeueFilterSQL, "", "")
			n := len(args)
			args = append(args, after.Type, after.ID)
			rows, err := s.pool.Query(ctx, s.q.replayAggregates+where+
				` AND (aggregate_type, aggregate_id) > ($`+strconv.Itoa(n+1)+`, $`+strconv.Itoa(n+2)+`)`+
				` ORDER BY aggregate_type, aggregate_id LIMIT `+strconv.Itoa(limit), args...)
			if err != nil {
				return nil, s.wrap("replay", err)
			}
			defer rows.Close()
			var out []pages.Aggregate
			for rows.Next() {
				var a pages.Aggregate
				if err := rows.Scan(&a.Type, &a.ID); err != nil {
					return nil, s.wrap("replay", err)
				}
				out = append(out, a)
			}
			return out, s.wrap("replay", rows.Err())
		},
		ReplayAggregate: func(ctx context.Context, agg pages.Aggregate, a store.OperatorAction, dryRun bool) (int64, *store.HeldAggregate, error) {
			return s.replayAggregate(ctx, req.Filter, agg, a, dryRun)
		},
	})
}

// replayAggregate replays the matching events of one aggregate in one
// transaction, in id order, unless an event holds the aggregate back.
func (s *Store) replayAggregate(ctx context.Context, f store.ReplayFilter, agg pages.Aggregate, a store.OperatorAction, dryRun bool) (int64, *store.HeldAggregate, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, nil, s.wrap("replay", err)
	}
	defer tx.Rollback(ctx)
	where, args := filter.Replay(f, requeueFilterSQL, agg.Type, agg.ID)
	rows, err := tx.Query(ctx, s.q.replayRows+where+` ORDER BY id FOR UPDATE`, args...)
	if err != nil {
		return 0, nil, s.wrap("replay", err)
	}
	ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var rowID int64
		var id string
		err := r.Scan(&rowID, &id)
		return id, err
	})
	if err != nil || len(ids) == 0 {
		return 0, nil, s.wrap("replay", err)
	}
	var heldBy, status string
	switch err := tx.QueryRow(ctx, s.q.replayHeld, agg.Type, agg.ID).Scan(&heldBy, &status); {
	case err == nil:
		eid, perr := outbox.ParseEventID(heldBy)
		if perr != nil {
			return 0, nil, s.wrap("replay", perr)
		}
		return 0, &store.HeldAggregate{AggregateType: agg.Type, AggregateID: agg.ID, EventID: eid,
			Status: outbox.Status(status), Matched: int64(len(ids))}, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return 0, nil, s.wrap("replay", err)
	}
	if dryRun {
		return int64(len(ids)), nil, nil
	}
	for _, id := range ids {
		one := a
		if one.EventID, err = outbox.ParseEventID(id); err != nil {
			return 0, nil, s.wrap("replay", err)
		}
		if err := s.operatorChangeTx(ctx, tx, one, store.ReplayChange); err != nil {
			return 0, nil, err
		}
	}
	return int64(len(ids)), nil, s.wrap("replay: commit", tx.Commit(ctx))
}
