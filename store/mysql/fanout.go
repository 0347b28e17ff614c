package mysql

import (
	"context"
	"database/sql"
	"slices"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// fanoutNames render the fan-out's statements: the table names, From, the
// source table of a copy (checked by backend.CopySource), and IDs, its row
// ids (idList).
type fanoutNames struct {
	store.Tables
	From, IDs string
}

// CopyEvents implements store.Store. It writes the copies as Enqueue
// does: in one transaction, first the locks of their aggregates' rows in
// ascending order, then one INSERT ... SELECT in source id order, whose
// rows the table's triggers number and put in their aggregate's lane; and
// it tells the in-process observers after the commit.
func (s *Store) CopyEvents(ctx context.Context, from string, ids []int64) (int64, error) {
	if err := backend.CopySource(from, s.t.Outbox); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	n := fanoutNames{Tables: s.t, From: from, IDs: idList(ids)}
	lock, err := statements.RenderNamed("fanout.lock_aggregates", n)
	if err != nil {
		return 0, err
	}
	insert, err := statements.RenderNamed("fanout.copy", n)
	if err != nil {
		return 0, err
	}
	var copied int64
	err = s.inTx(ctx, "copy events", func(tx *sql.Tx) error {
		copied = 0
		if _, err := tx.ExecContext(ctx, lock); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, insert)
		if err != nil {
			return err
		}
		copied, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, s.wrapCopy(from, err)
	}
	if copied > 0 {
		s.observers.Notify()
	}
	return copied, nil
}

// wrapCopy is wrap for a copy from the table from, which may be the table
// that does not exist.
func (s *Store) wrapCopy(from string, err error) error {
	var missing string
	if mysqlErrorNumber(err) == errNoSuchTable {
		missing = backend.CopyMissing(from, s.t.Outbox)
	}
	return backend.WrapError("copy events", err, missing)
}

// EventTypes implements store.Store.
func (s *Store) EventTypes(ctx context.Context) ([]store.EventTypes, error) {
	rows, err := s.db.QueryContext(ctx, s.q.eventTypes)
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
