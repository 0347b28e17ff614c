package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// fanoutNames render the fan-out's statements: the table names and From,
// the source table of a copy (checked by backend.CopySource).
type fanoutNames struct {
	store.Tables
	From string
}

// CopyEvents implements store.Store. It writes the copies as Enqueue
// does: in one transaction, first the advisory locks of their aggregates
// in Enqueue's order (unless Config.NoAggregateLock), then one INSERT ...
// SELECT in source id order, whose rows the table's insert trigger locks,
// numbers, puts in their aggregate's lane and gives their ids; and it
// wakes the relays as Enqueue does (a NOTIFY at commit, then the in-process
// observers).
func (s *Store) CopyEvents(ctx context.Context, from string, ids []int64) (int64, error) {
	if err := backend.CopySource(from, s.t.Outbox); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	n := fanoutNames{Tables: s.t, From: from}
	lock, err := statements.RenderNamed("fanout.lock_aggregates", n)
	if err != nil {
		return 0, err
	}
	insert, err := statements.RenderNamed("fanout.copy", n)
	if err != nil {
		return 0, err
	}
	var copied int64
	err = retrySerialization(ctx, func() error {
		copied = 0
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if !s.cfg.NoAggregateLock {
				if _, err := tx.Exec(ctx, lock, s.t.Outbox, ids); err != nil {
					return err
				}
			}
			tag, err := tx.Exec(ctx, insert, ids)
			if err != nil {
				return err
			}
			copied = tag.RowsAffected()
			if copied > 0 && !s.cfg.NoNotify && s.notify.claimInTx(ctx, time.Now()) {
				if _, err := tx.Exec(ctx, notifySQL, s.t.Outbox); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return 0, s.wrapCopy(from, err)
	}
	if copied > 0 {
		s.notify.enqueued()
	}
	return copied, nil
}

// wrapCopy is wrap for a copy from the table from, which may be the table
// that does not exist.
func (s *Store) wrapCopy(from string, err error) error {
	var missing string
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == sqlstateUndefinedTable {
		missing = backend.CopyMissing(from, s.t.Outbox)
	}
	return backend.WrapError("copy events", err, missing)
}

// EventTypes implements store.Store.
func (s *Store) EventTypes(ctx context.Context) ([]store.EventTypes, error) {
	rows, err := s.pool.Query(ctx, s.q.eventTypes)
	if err != nil {
		return nil, s.wrap("event types", err)
	}
	defer rows.Close()
	var out []store.EventTypes
	for rows.Next() {
		var e store.EventTypes
		if err := rows.Scan(&e.EventType, &e.AggregateType, &e.Count); err != nil {
			return nil, s.wrap("event types", err)
		}
		out = append(out, e)
	}
	return out, s.wrap("event types", rows.Err())
}
